"""The child side of a public (HumanEval) verifier: runs the problem's own tests on the agent's function.

Started by check.py as `python3 -I -B humaneval_harness.py SOLUTION` in a scratch directory,
with a scrubbed environment (no EVALRIG_VERDICT). It reads the problem's test code, its
entry point and a nonce from stdin *before* it loads the agent's file, and ends with one
JSON line carrying the nonce: a solution that exits on import never prints it, so it cannot
pass. Exit 0 when the problem's `check` passed, 1 otherwise.
"""

import importlib.util
import json
import sys


def main(argv):
    request = json.loads(sys.stdin.read())
    nonce, test, entry = request["nonce"], request["test"], request["entry_point"]
    error = None
    try:
        spec = importlib.util.spec_from_file_location("solution", argv[1])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        namespace = {"__name__": "humaneval_test"}
        exec(compile(test, "test.py", "exec"), namespace)  # the benchmark's own check(candidate)
        namespace["check"](getattr(module, entry))
    except BaseException as exc:  # the agent's code may raise anything, SystemExit included
        error = type(exc).__name__
    sys.stdout.write("\n" + json.dumps({"nonce": nonce, "passed": error is None, "error": error}) + "\n")
    sys.stdout.flush()
    return 0 if error is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
