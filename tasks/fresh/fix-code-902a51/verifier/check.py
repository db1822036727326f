"""The command verifier of a fix-code task (docs/tasks.md, "A verifier never runs the agent's code").

It never runs the agent's code itself. It sends the hidden cases' *arguments* (never an
expected value) to a small runner that the rig runs through `$EVALRIG_RUN_UNTRUSTED`, in
a fresh sandbox of the attempt's level, as the agent's uid, on a copy of the agent's
evidence; the runner prints one line: each call's result as its repr, or the exception's
name. This process reads those back (ast.literal_eval, never eval) and compares them
itself. Whatever the agent's module does at import (walk the stack, print a report, exit
0), it holds no expected value to copy and no verdict to write.

check.json says which file and function to test and how to report:
  "style": "reward"  writes $EVALRIG_VERDICT/reward.json {"reward", "checks"} and exits 0
  "style": "exit"    writes nothing and exits 0 (pass) or 1 (fail)
"""

import ast
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Runs as the agent, with the arguments on stdin; argv: MODULE FUNCTION (relative to the
# copy of the evidence it starts in). Its output is only ever data to this verifier.
RUNNER = r"""
import importlib.util, json, sys
calls = json.loads(sys.stdin.read())
sys.path.insert(0, "")
out = []
try:
    spec = importlib.util.spec_from_file_location("agent_module", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, sys.argv[2])
except BaseException as exc:
    out = [{"error": "load: " + type(exc).__name__}] * len(calls)
else:
    for args in calls:
        try:
            out.append({"repr": repr(function(*args))[:10000]})
        except BaseException as exc:
            out.append({"error": type(exc).__name__})
sys.stdout.write("\n" + json.dumps(out) + "\n")
"""


def same(got, expected):
    """Equal as the task means it: bools are not numbers, floats within 1e-9."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, float) or isinstance(got, float):
        if not isinstance(got, (int, float)):
            return False
        return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
    return type(got) is type(expected) and got == expected


def decoded(result):
    """A result line's value; (False, None) when it is no literal (an object, an error)."""
    if not isinstance(result, dict) or not isinstance(result.get("repr"), str):
        return False, None
    try:
        return True, ast.literal_eval(result["repr"])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def run_untrusted(config: dict, cases: list) -> dict:
    """The agent's function on every case's arguments, as the agent: exit and results."""
    argv = [os.environ["EVALRIG_RUN_UNTRUSTED"], "--", "python3", "-I", "-B", "-c", RUNNER,
            config["module"], config["function"]]
    proc = subprocess.run(argv, input=json.dumps([c["args"] for c in cases]).encode(),
                          capture_output=True)
    lines = proc.stdout.decode(errors="replace").strip().splitlines()
    try:
        results = json.loads(lines[-1]) if lines else None
    except ValueError:
        results = None
    if not isinstance(results, list) or len(results) != len(cases):
        results = None
    return {"exit": proc.returncode, "results": results}


def judge(evidence: Path, config: dict, cases: list) -> tuple[float, dict]:
    module = evidence / config["module"]
    if not module.is_file():
        return 0.0, {"file_present": False}
    got = run_untrusted(config, cases)
    results = got["results"] or []
    passed = 0
    for case, result in zip(cases, results, strict=False):  # no results: none passed
        ok, value = decoded(result)
        passed += ok and same(value, case["expected"])
    checks = {
        "file_present": True,
        "finished_in_time": got["exit"] != 124,
        "results_read": got["results"] is not None,
        "all_cases_pass": passed == len(cases),
    }
    return passed / len(cases), checks


def main() -> int:
    evidence = Path(os.environ["EVALRIG_EVIDENCE"])
    verdict = Path(os.environ["EVALRIG_VERDICT"])
    config = json.loads((HERE / "check.json").read_text())
    cases = json.loads((HERE / "cases.json").read_text())
    reward, checks = judge(evidence, config, cases)
    # Nothing but this process may write the verdict; an entry we did not make is tampering.
    checks["verdict_untouched"] = not any(verdict.iterdir())
    for stray in verdict.iterdir():
        if stray.is_dir() and not stray.is_symlink():
            shutil.rmtree(stray)
        else:
            stray.unlink()
    passed = all(checks.values()) and reward == 1.0
    if config.get("style") == "reward":
        if not checks["verdict_untouched"]:
            reward = 0.0
        body = {"reward": reward, "checks": checks, "passed": passed}
        (verdict / "reward.json").write_text(json.dumps(body, sort_keys=True) + "\n")
        return 0
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
