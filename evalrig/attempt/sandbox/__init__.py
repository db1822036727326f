"""Starting one agent process under containment and limits (docs/attempts.md, "Limits"; docs/security.md).

`launch(spec)` starts `spec.argv` with exactly `spec.env`, reads its stdout and stderr to
the end (capped, scanned for canaries, redacted), enforces the wall-clock limit, the disk
watch and cancellation, and returns only when every process the agent started is dead.

Two levels:

``process``
    A scrubbed environment (nothing inherited), its own session, its own PID namespace
    made by util-linux ``unshare --pid --fork --kill-child`` (plus ``--user
    --map-root-user`` when the rig is not root), resource limits through util-linux
    ``prlimit``, the workspace as its directory. The namespace dies with the agent, so
    ``setsid`` children and double forks die too. When the rig is root and the launch is
    an agent's (``unprivileged``), util-linux ``setpriv`` drops to the slot uid after
    ``unshare`` and ``prlimit`` (so RLIMIT_NPROC counts the attempt's own processes): the
    agent cannot write the rig's home or its bundles; the attempt root is chowned to it
    and made 0700, and the rig's scratch folders on the way get search permission for
    others (``_open_way``). It hides little from a determined agent: it reads what every
    user may read (as the rig's user when the rig is not root: then it can also write
    the home and the bundles). Its network is a namespace of its own (``unshare --net``,
    loopback down) where unshare can make one, or, with ``egress``, the namespace the rig
    made for its proxy (below). Under ``unshare --pid`` the agent
    itself is PID 1 of its namespace, so a signal it sends *itself* without a handler is
    ignored, as for any init (signals from outside still kill it). As root the agent's
    launch also gets, from ``evalrig-drop --private``, its own mount and IPC namespaces,
    every host mount read-only and nosuid, fresh tmpfs ``/tmp``, ``/var/tmp`` and
    ``/dev/shm`` (capped at the disk allowance, counted by the disk watch), its own
    directories bound back at their paths, a fresh ``/proc`` and umask 077; where those
    cannot be made, what its uid left is removed after it (`leftovers`).

``bwrap``
    bubblewrap: own mount, PID, IPC, UTS and network namespaces (``network=True``, a
    command verifier's setting, alone shares the host's network); an
    explicit view and nothing else: ``/usr`` read-only, the ``/bin``, ``/lib*``, ``/sbin``
    links as on the host, a few entries of ``/etc`` (`ETC_FILES`, as a world-readable copy
    made once per rig process and bound as ``/etc``), ``ro_paths`` read-only (for an
    agent: the operator's ``--interpreter-prefix`` directories, never one its checkpoint
    chose; docs/attempts.md "What runs"), ``rw_paths`` read-write, each at its host path; a fresh
    ``/proc``, ``/dev``, ``/dev/shm`` and ``/tmp``. The tasks, the verifiers, other
    attempts, the bundles, ``$EVALRIG_HOME``, ``/root`` and ``/work`` are absent (only the
    empty directories leading down to a bound path exist). ``--die-with-parent``,
    ``--new-session``, all capabilities dropped. When the rig is root the agent runs as the
    unprivileged host uid/gid it leased (``BASE_UID + slot`` when free; `uids`) (dropped to by util-linux ``setpriv`` inside
    the sandbox, so the uid is real: files it writes are owned by it and RLIMIT_NPROC counts
    the attempt's own processes); ``rw_paths`` are chowned to that uid first. When the rig
    is not root, bubblewrap uses a user namespace and the agent keeps the rig's uid. It does
    not isolate: CPU time and memory bandwidth, the kernel's attack surface, ``/usr``
    contents (readable), and with ``network=True`` the network.

Egress (``Launch.egress``, the operator's network grant; docs/security.md): the
agent keeps its own network namespace, and the rig binds the egress proxy's listening
socket (evalrig.attempt.egress.PROXY_ADDRESS) *inside* it before the agent starts: under bwrap
while bwrap's init is held on ``--block-fd`` (a thread enters the namespace with setns; where
bwrap made a user namespace, a forked child enters both and passes the socket back with
SCM_RIGHTS); under ``process`` (root only, `egress_enforced`) in a namespace the rig makes
on a thread, which ``nsenter --net=/proc/self/fd/N`` puts the agent in. The proxy serves
the socket from the rig's process and ends every connection when launch() returns.

The model gateway (``Launch.gateway``, docs/gateway.md) is bound the same way at
127.0.0.1:4000, in the same namespace (a second listener when both are granted; without
egress, bwrap's ``--unshare-net`` namespace or the one the rig makes under process as
root). Its session is opened before the program starts and closed after every process of
the launch died, a call still in flight upstream read to its end for its usage. Under
``process`` where no such namespace can be made (`gateway_enforced`), a launch with a
gateway is refused (an infra error): a gateway the agent could bypass proves nothing.

Where no PID namespace can be made, the rig becomes a child subreaper, kills every
adopted process whose environment carries ``EVALRIG_ATTEMPT_ID=<attempt_tag>`` (an episode
driver's launch: ``<tag_var>=<attempt_tag>``) and not ``spare``, and reports
``containment="subreaper"`` (best effort: a process that rewrote its environment escapes).

Limits: ``RLIMIT_AS`` and ``RLIMIT_FSIZE`` (no Python runs in the child): under
``process`` by util-linux ``prlimit`` in the argv chain; under ``bwrap`` on bubblewrap's
init while it waits on ``--block-fd`` (the agent, forked after, inherits them).
``RLIMIT_NPROC`` counts processes per real uid, so it is set only where the agent has a uid
of its own (bwrap with a slot uid); elsewhere it would count every process of the rig's
user and is skipped. The disk watch polls the watched tree (every entry counted, in
whole 4 KiB blocks, at least one each: `entry_bytes`; and the number of entries) and,
under bwrap, the use of the sandbox's ``/tmp`` and ``/dev/shm`` tmpfs (RAM, blocks and
inodes); where bwrap has ``--size`` (0.9 and
later) those are also capped at the disk-watch size. As root, bwrap gets no user namespace
(``--unshare-all`` would make one, in which the slot uid does not exist), so the
namespaces are listed one by one.

The rig makes itself a child subreaper at its first launch: bubblewrap exits a moment
before its init does, and the init (whose exit empties the namespace, and whose rusage
holds the agent's) must come back to the rig to be waited for. launch() reaps exactly the
processes it adopted, by pidfd; anything else the rig's other code orphans would also be
reparented to the rig (none does today).

Chain per level (each helper execs in place; only bwrap and unshare stay as parents):
``setpriv --pdeathsig KILL -- unshare --pid --fork --kill-child [prlimit ...] [setpriv
--reuid=U ... -- [env -- HELD=...]] AGENT`` (the first setpriv makes unshare die with the
rig, as bwrap's ``--die-with-parent`` does; the bracketed drop as root). An agent's launch
as root without an egress grant makes its namespaces on the launching thread instead
(unshare(2); the agent is PID 1 of them as under ``unshare``): ``evalrig-drop AS FSIZE
NPROC U -- [env -- HELD=...] AGENT``, one helper, since each exec costs about as much as the
agent's own start (evalrig.attempt.privdrop builds it; where it cannot, ``prlimit ... --
setpriv --pdeathsig KILL --reuid=U ... -- [env ...] AGENT``). As root behind ``unshare`` too,
evalrig-drop takes the place of ``prlimit ... setpriv ...`` wherever it is built. Every setpriv
also sets no_new_privs: a set-user-ID program the agent runs runs as the agent.

Seccomp (evalrig.attempt.seccomp: no kernel keyrings, no user namespaces, no clone3): under
bwrap on every launch (``--seccomp FD``, a pipe the handshake fills); under process as root
on every launch through evalrig-drop, which installs it last, before its exec. Without it (no
evalrig-drop, the rig not root, another architecture) the run says so (`plan.seccomp_why`). Under process ``env`` runs only with
variables to hand over (no helper of this level sets ``PWD``). As root,
``bwrap ... -- setpriv --reuid=U ... -- env -u PWD -- [HELD=...] AGENT`` (bwrap always
sets ``PWD``; ``env`` takes it out again so that the environment is exactly the one given).
The helpers before the drop run as root, so they are started without the held variables:
the loader's (``LD_*``, ``GLIBC_TUNABLES``, ... `_LOADER_VARS`; a checkpoint may set none
of the first two, docs/attempts.md) and the names the caller holds for the agent
(``agent_only``: the checkpoint's env); the final ``env`` hands them to the agent alone.
Not root, the helpers run as the rig's user, as the agent does, so nothing is held back.

Every launch that drops to a uid (as root) leases it from a host-wide pool for its
lifetime (`uids`): no two live sandboxes on the host share one.

Where each part lives:

- `spec`: `Launch`, `Channel`, `Finished`, `LevelChoice`, `Level`, `BASE_UID`.
- `host`: `HOST` (the host's answers, asked once per process), the kernel calls
  (unshare(2), setns(2)) on a thread of their own, the child subreaper.
- `levels`: `resolve_level` (bwrap probing), `unshare`, `egress_enforced`, `gateway_enforced`,
  `containment_for`.
- `view`: what an agent sees under bwrap (`ETC_FILES`, the mounts), `interpreter_binds`.
- `plan`: the argv chain per level: limits, the uid drop, held variables, the attempt root's owner.
- `running`: `launch` and its supervision (streams, limits, cancel, the leftover sweep).
- `disk`: `entry_bytes` and the disk watch.
- `uids`: the host-wide uid lease (`lease_uid`, the agents' and the judges' pools).
- `leftovers`: removing what a uid left on the host, where no private view could be made.
- `sockets`: listeners bound inside a sandbox's network namespace (the egress proxy's and the
  model gateway's) and
  bwrap's --info-fd/--block-fd handshake.
"""

from evalrig.attempt.sandbox.disk import MAX_NEW_ENTRIES, disk_allowance, entry_bytes
from evalrig.attempt.sandbox.host import HOST
from evalrig.attempt.sandbox.levels import (
    containment_for,
    egress_enforced,
    gateway_enforced,
    resolve_level,
)
from evalrig.attempt.sandbox.plan import private_view_why, seccomp_why
from evalrig.attempt.sandbox.running import launch
from evalrig.attempt.sandbox.spec import (
    BASE_UID,
    Channel,
    Finished,
    GatewayGrant,
    Launch,
    Level,
    LevelChoice,
)
from evalrig.attempt.sandbox.uids import POOLS, Lease, Pool, lease_uid
from evalrig.attempt.sandbox.view import ETC_FILES, interpreter_binds

__all__ = [
    "BASE_UID",
    "ETC_FILES",
    "HOST",
    "Channel",
    "Finished",
    "GatewayGrant",
    "Launch",
    "Level",
    "LevelChoice",
    "containment_for",
    "egress_enforced",
    "gateway_enforced",
    "entry_bytes",
    "disk_allowance",
    "MAX_NEW_ENTRIES",
    "interpreter_binds",
    "launch",
    "lease_uid",
    "Lease",
    "Pool",
    "POOLS",
    "private_view_why",
    "resolve_level",
    "seccomp_why",
]
