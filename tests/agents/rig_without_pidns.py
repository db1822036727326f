"""The rig's CLI as a host where no PID namespace can be made would run it.

`python rig_without_pidns.py ARGS...` is `evalrig ARGS...` with the sandbox told that
`unshare` cannot make a PID namespace here, so that every `--sandbox process` launch falls
back to the subreaper and its leftover sweep (docs/security.md). A fresh process, because
the fallback makes the process a child subreaper for good.
"""

import sys

from evalrig.attempt import sandbox
from evalrig.cli import main

sandbox.HOST.pretend("unshare", None)
sys.argv[0] = "evalrig"
sys.exit(main())
