"""The rig's CLI as a host where `process` as root cannot give the agent private mount and
IPC namespaces would run it.

`python rig_without_private_mounts.py ARGS...` is `evalrig ARGS...` with the sandbox told
that evalrig-drop --private fails here, so that every agent's launch under `--sandbox
process` as root shares the host's /tmp, /var/tmp, /dev/shm and System V IPC, and the rig
removes what the agent's uid left after each attempt (docs/security.md).
"""

import sys

from evalrig.attempt import sandbox
from evalrig.cli import main

sandbox.HOST.pretend("private view", "pretended by tests/agents/rig_without_private_mounts.py")
sys.argv[0] = "evalrig"
sys.exit(main())
