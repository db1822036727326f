"""The rig's CLI as a host without a C compiler would run it.

`python rig_without_evalrig_drop.py ARGS...` is `evalrig ARGS...` with the sandbox told that
evalrig-drop cannot be built here, so that every agent's launch under `--sandbox process` as
root goes through util-linux prlimit and setpriv, which install no seccomp filter, and the run
says so in its sandbox warnings (docs/security.md).
"""

import sys

from evalrig.attempt import sandbox
from evalrig.cli import main

sandbox.HOST.pretend("tool: evalrig-drop", None)
sys.argv[0] = "evalrig"
sys.exit(main())
