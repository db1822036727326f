"""The child side of a fix-code verifier: runs the agent's function on the hidden cases.

Started by check.py as `python3 -I -B fix_harness.py MODULE FUNCTION` in a scratch
directory, with a scrubbed environment (no EVALRIG_VERDICT). It reads the hidden cases and
a nonce from stdin *before* it imports the agent's module, so the agent's code cannot see
the expected answers at import time, and it ends with one JSON line carrying the nonce:
a module that calls `sys.exit(0)` on import cannot pass, because it never prints it.
Exit 0 when every case passed, 1 otherwise.
"""

import importlib.util
import json
import math
import sys


def same(got, expected):
    """Equal as the task means it: bools are not numbers, floats within 1e-9."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, float) or isinstance(got, float):
        if not isinstance(got, (int, float)):
            return False
        return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
    return type(got) is type(expected) and got == expected


def run_cases(function, cases):
    failures = []
    for case in cases:
        try:
            got = function(*case["args"])
        except Exception as exc:  # the agent's code may raise anything
            failures.append({"args": case["args"], "error": type(exc).__name__})
            continue
        if not same(got, case["expected"]):
            failures.append({"args": case["args"], "got": repr(got)[:80]})
    return failures


def main(argv):
    request = json.loads(sys.stdin.read())
    nonce, cases = request["nonce"], request["cases"]
    spec = importlib.util.spec_from_file_location("agent_module", argv[1])
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        function = getattr(module, argv[2])
    except Exception as exc:  # a module that does not load fails every case
        failures = [{"load_error": type(exc).__name__}] * len(cases)
    else:
        failures = run_cases(function, cases)
    passed = len(cases) - len(failures)
    report = {"nonce": nonce, "passed": passed, "total": len(cases), "failures": failures[:3]}
    sys.stdout.write("\n" + json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
