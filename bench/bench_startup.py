"""Start-up: the CPU one `evalrig` command costs before and beside its work, for the commands a
release script (and the test suite: some 1,150 starts per run) calls most.

Each command runs REPEAT times as its own process, the way eval.sh runs it; the figure is
its CPU (user + system, from the kernel's accounting of the reaped child), median and
minimum, beside two floors measured in the same run: a bare interpreter, and one that
imports the stack every command needs (pydantic, typer, rich). `seal` of an already sealed
checkpoint and `validate` of the bundled tasks do little work, so their figures are mostly
the imports of the modules they load.

    .venv/bin/python bench/bench_startup.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVALRIG = Path(sys.executable).parent / "evalrig"


def cpu_of(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    repeat = ap.parse_args().repeat
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "EVALRIG_HOME": f"{tmp}/home", "NO_COLOR": "1"}
        checkpoint = Path(tmp) / "champion"
        shutil.copytree(ROOT / "examples" / "champion", checkpoint)
        subprocess.run([str(EVALRIG), "seal", str(checkpoint)], env=env, check=True, capture_output=True)
        bundle = Path(tmp) / "bundle"
        subprocess.run([str(EVALRIG), "run", "--checkpoint", str(checkpoint), "--tasks", "tasks",
                        "--suite", "invariant", "--out", str(bundle)],
                       env=env, cwd=ROOT, check=True, capture_output=True)
        py = sys.executable
        steps = {
            "python -c pass (floor)": [py, "-c", "pass"],
            "import pydantic, typer, rich (the stack)": [py, "-c", "import pydantic, typer, rich"],
            "evalrig --version": [str(EVALRIG), "--version"],
            "evalrig seal (sealed already)": [str(EVALRIG), "seal", str(checkpoint)],
            "evalrig validate --tasks tasks": [str(EVALRIG), "validate", "--tasks", "tasks"],
            "evalrig show BUNDLE": [str(EVALRIG), "show", str(bundle)],
        }
        print(f"bench_startup: os.cpu_count()={os.cpu_count()}, load average {os.getloadavg()[0]:.1f}, "
              f"{repeat} starts each (CPU ms, user + system)")
        floor = stack = 0.0
        for name, argv in steps.items():
            cpu_of(argv, env)  # once first: the page cache warm, as in a script's later calls
            got = sorted(cpu_of(argv, env) for _ in range(repeat))
            median = statistics.median(got) * 1000
            if name.endswith("(floor)"):
                floor = median
            elif name.endswith("(the stack)"):
                stack = median
            extra = f"  {median / floor:5.1f}x the bare interpreter" if floor else ""
            extra += f", +{median - stack:6.1f} ms over the stack" if stack and name.startswith("evalrig") else ""
            print(f"  {name:42s} median {median:7.1f}  min {got[0] * 1000:7.1f}{extra}")


if __name__ == "__main__":
    main()
