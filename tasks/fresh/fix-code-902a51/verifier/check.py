"""The command verifier of a fix-code task (DESIGN §5), run by the rig from verifier/.

It never imports the agent's code: it copies the edited file out of the evidence into a
scratch directory and runs fix_harness.py on it in a child process, with an environment
that carries neither EVALRIG_VERDICT nor EVALRIG_EVIDENCE, and judges by what the child
did: its exit, and its last line, which must carry the nonce this process sent it.

check.json says which file and function to test and how to report:
  "style": "reward"  writes $EVALRIG_VERDICT/reward.json {"reward", "checks"} and exits 0
  "style": "exit"    writes nothing and exits 0 (pass) or 1 (fail)
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


def run_child(module: Path, function: str, cases: list, timeout_s: float) -> dict:
    """Run the hidden cases against `module` in a child; return what the child showed."""
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="fix-check-") as scratch:
        copy = Path(scratch) / module.name
        shutil.copyfile(module, copy)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        try:
            proc = subprocess.run(
                [sys.executable, "-I", "-B", str(HERE / "fix_harness.py"), str(copy), function],
                input=json.dumps({"nonce": nonce, "cases": cases}),
                capture_output=True,
                text=True,
                cwd=scratch,
                env=env,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return {"finished": False, "exit": None, "report": None}
    lines = proc.stdout.strip().splitlines()
    report = None
    if lines:
        try:
            candidate = json.loads(lines[-1])
        except ValueError:
            candidate = None
        if isinstance(candidate, dict) and candidate.get("nonce") == nonce:
            report = candidate
    return {"finished": True, "exit": proc.returncode, "report": report}


def judge(evidence: Path, config: dict, cases: list) -> tuple[float, dict]:
    module = evidence / config["module"]
    if not module.is_file():
        return 0.0, {"file_present": False}
    child = run_child(module, config["function"], cases, float(config.get("timeout_s", 20)))
    report = child["report"]
    passed = report["passed"] if report else 0
    checks = {
        "file_present": True,
        "finished_in_time": child["finished"],
        "child_exit_0": child["exit"] == 0,
        "report_authentic": report is not None,
        "all_cases_pass": report is not None and report["passed"] == report["total"] == len(cases),
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
