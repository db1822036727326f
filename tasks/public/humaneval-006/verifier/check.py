"""The command verifier of a public HumanEval task (docs/curves.md, "Public benchmarks").

It never imports the agent's code: it copies out/solution.py from the evidence into a scratch
directory and runs humaneval_harness.py on it in a child process, with an environment that
carries neither EVALRIG_VERDICT nor EVALRIG_EVIDENCE, and judges by what the child did: its
exit 0, and its last line, which must carry the nonce this process sent it. problem.json holds
the problem's test code and entry point, never shown to the agent. Exit 0 pass, 1 fail.
"""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def judge(solution: Path, problem: dict, timeout_s: float) -> bool:
    if not solution.is_file() or solution.is_symlink():
        return False
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="humaneval-check-") as scratch:
        copy = Path(scratch) / "solution.py"
        shutil.copyfile(solution, copy)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        request = {"nonce": nonce, "test": problem["test"], "entry_point": problem["entry_point"]}
        try:
            proc = subprocess.run(
                [sys.executable, "-I", "-B", str(HERE / "harness.py"), str(copy)],
                input=json.dumps(request), capture_output=True, text=True, cwd=scratch, env=env,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return False
    lines = proc.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else None
    except ValueError:
        report = None
    authentic = isinstance(report, dict) and report.get("nonce") == nonce
    return proc.returncode == 0 and authentic and report.get("passed") is True


def main() -> int:
    evidence = Path(os.environ["EVALRIG_EVIDENCE"])
    verdict = Path(os.environ["EVALRIG_VERDICT"])
    problem = json.loads((HERE / "problem.json").read_text())
    passed = judge(evidence / "out" / "solution.py", problem, float(problem.get("timeout_s", 20)))
    # Nothing but this process may write the verdict: anything there is tampering, and fails.
    if any(verdict.iterdir()):
        return 1
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
