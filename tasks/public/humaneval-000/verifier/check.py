"""The command verifier of a public HumanEval task (docs/curves.md, "Public benchmarks").

It never runs the agent's code itself. The problem's own test code (problem.json, never shown
to the agent) runs here, in the verifier, with `candidate` a proxy: each call's arguments
go, as their repr, to a small runner that the rig runs through `$EVALRIG_RUN_UNTRUSTED` in a
fresh sandbox as the agent's uid; the runner imports out/solution.py, calls the entry point
and prints the result's repr, which this process reads back with ast.literal_eval (never
eval). A call that fails, or a result that is no literal, raises here, so `check` fails.
Exit 0 pass, 1 fail.
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Runs as the agent, the call's arguments (a tuple's repr) on stdin; argv: ENTRY_POINT.
RUNNER = r"""
import ast, importlib.util, json, sys
args = ast.literal_eval(sys.stdin.read())
spec = importlib.util.spec_from_file_location("solution", "out/solution.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
result = getattr(module, sys.argv[1])(*args)
sys.stdout.write("\n" + json.dumps({"repr": repr(result)}) + "\n")
"""


class CallFailed(Exception):
    """The agent's function did not give back a value this verifier can read."""


def proxy(entry_point: str):
    seen = {}

    def candidate(*args):
        key = repr(args)
        if key not in seen:  # the same arguments give the same answer; each call is a sandbox
            proc = subprocess.run(
                [os.environ["EVALRIG_RUN_UNTRUSTED"], "--", "python3", "-I", "-B", "-c", RUNNER, entry_point],
                input=key.encode(), capture_output=True)
            lines = proc.stdout.decode(errors="replace").strip().splitlines()
            try:
                seen[key] = ast.literal_eval(json.loads(lines[-1])["repr"]) if proc.returncode == 0 else CallFailed
            except (IndexError, ValueError, KeyError, TypeError, SyntaxError, MemoryError, RecursionError):
                seen[key] = CallFailed
        if seen[key] is CallFailed:
            raise CallFailed(key[:200])
        return seen[key]

    return candidate


def main() -> int:
    evidence = Path(os.environ["EVALRIG_EVIDENCE"])
    verdict = Path(os.environ["EVALRIG_VERDICT"])
    problem = json.loads((HERE / "problem.json").read_text())
    solution = evidence / "out" / "solution.py"
    if not solution.is_file() or solution.is_symlink():
        return 1
    namespace = {"__name__": "humaneval_test"}
    exec(compile(problem["test"], "test.py", "exec"), namespace)  # the benchmark's own, trusted
    try:
        namespace["check"](proxy(problem["entry_point"]))
        passed = True
    except (AssertionError, CallFailed, TypeError, ValueError, ArithmeticError):
        passed = False  # a wrong value or one this verifier cannot read
    # Nothing but this process may write the verdict: anything there is tampering, and fails.
    if any(verdict.iterdir()):
        return 1
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
