"""Runs one launch() in a fresh interpreter and prints what came back as JSON.

Used by tests that must not touch the test process itself: the memory of a 1 GB stream
(VmHWM before and after), and the subreaper fallback (which makes the process a child
subreaper for good). argv[1] is a JSON object: the Launch fields (paths as strings), plus
"force_subreaper": true to pretend no PID namespace can be made here.
"""

import dataclasses
import json
import sys
from pathlib import Path

from evalrig.attempt import sandbox


def vm_hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


ask = json.loads(sys.argv[1])
if ask.pop("force_subreaper", False):
    sandbox.HOST.pretend("unshare", None)
    sandbox.host._become_subreaper()
for key in ("cwd", "stdout_path", "stderr_path"):
    ask[key] = Path(ask[key])
for key in ("rw_paths", "ro_paths"):
    ask[key] = [Path(p) for p in ask[key]]
if ask.get("disk_watch"):
    ask["disk_watch"] = (Path(ask["disk_watch"][0]), ask["disk_watch"][1])
ask["scan_for"] = [bytes.fromhex(x) for x in ask.get("scan_for", [])]
before = vm_hwm()
finished = sandbox.launch(sandbox.Launch(**ask))
after = vm_hwm()
print(
    json.dumps({"finished": dataclasses.asdict(finished), "hwm_before": before, "hwm_after": after})
)
