"""A stand-in for the rig's `$EVALRIG_RUN_UNTRUSTED`, for tests that run a task's command
verifier by hand (no rig): it runs the command in the evidence folder with a scrubbed
environment (PATH and LANG alone), as the rig's service does minus the sandbox. The real
service is tested through eval.sh (tests/test_redteam_untrusted.py)."""

from __future__ import annotations

import shlex
from pathlib import Path


def standin(dir: Path, evidence: Path) -> Path:
    """Write the stand-in program into `dir` (made if missing) and return its path."""
    dir.mkdir(parents=True, exist_ok=True)
    program = dir / "run-untrusted"
    program.write_text(
        "#!/bin/sh\n"
        '[ "$1" = "--" ] || exit 125\n'
        "shift\n"
        f"cd {shlex.quote(str(evidence))} || exit 125\n"
        'exec env -i PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 "$@"\n')
    program.chmod(0o755)
    return program
