"""A verifier never runs the agent's code itself (issue 20, findings 1 and 3; docs/security.md
"Untrusted code in verifiers"), through `eval.sh` as a release script drives it.

The red team's forgeries: a fix-code module that, at import, walks `sys._getframe()` back
to the child that held the nonce and the hidden cases, prints a winning report and calls
`os._exit(0)`; one that reads the cases file beside `sys.argv[0]`; a HumanEval
`solution.py` that defines nothing and forges the harness's report. And under `process` as
root, a verifier (and the agent's code it asks for) that looks for `EVALRIG_HOME` in
`/proc/*/environ` and tries to write the home. Then the service's own interface: exit
codes 124, 125 and 128+N, stdin and stdout passed through, nothing of the verifier's in the
call's view, the verifier's limit stopped during calls, and `untrusted.jsonl`.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import orjson
import pytest
from redteam import (
    ROOT,
    add_task,
    bwrap_works,
    eval_sh,
    make_checkpoint,
    results,
    run_train,
    utc_now,
)

SANDBOXES = ["bwrap", "process"]

# Leaves the buggy file as it is: 0 of the hidden cases on every fix-code task.
IDLE_AGENT = """\
import os
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("nothing changed\\n")
"""

# Replaces the task's module (FILE/FUNCTION from the prompt) with `MODULE`, FUNC its name.
REPLACING_AGENT = """\
import os, re
prompt = open(os.environ["EVALRIG_PROMPT"]).read()
rel = re.search(r"^FILE: (.+)$", prompt, re.M).group(1)
func = re.search(r"^FUNCTION: (.+)$", prompt, re.M).group(1)
with open(os.path.join(os.environ["EVALRIG_WORK"], rel), "w") as f:
    f.write(MODULE.replace("FUNC", func))
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("fixed\\n")
"""

# The red team's forgery (finding 1): at import, walk back to the frame holding the nonce
# and the cases, print the report the harness would, and leave before anything checks.
FRAME_FORGERY = '''
import json, os, sys
def _forge():
    f = sys._getframe()
    while f is not None:
        seen = f.f_locals
        if "nonce" in seen and "cases" in seen:
            n = len(seen["cases"])
            sys.stdout.write("\\n" + json.dumps({"nonce": seen["nonce"], "passed": n, "total": n,
                                                "failures": []}) + "\\n")
            sys.stdout.flush()
            os._exit(0)
        f = f.f_back
_forge()
def FUNC(*args):
    return None
'''

# The cases file beside sys.argv[0] (the harness's path once): a lookup table of answers.
ARGV0_FORGERY = '''
import json, os, sys
_TABLE = {}
try:
    with open(os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "cases.json")) as f:
        for case in json.load(f):
            _TABLE[json.dumps(case["args"])] = case["expected"]
except Exception:
    pass
def FUNC(*args):
    return _TABLE.get(json.dumps(list(args)))
'''


def forger(module: str) -> str:
    return f"MODULE = {module!r}\n" + REPLACING_AGENT


def fix_code_taskset(dir: Path) -> Path:
    """The bundled fix-code tasks: one fixed, and six fresh made now (after the seals)."""
    shutil.copytree(ROOT / "tasks" / "fixed" / "fix-in-range", dir / "fixed" / "fix-in-range")
    sources = sorted((ROOT / "tasks" / "fresh").glob("fix-code-*")) + [
        ROOT / "tasks" / "fixed" / "fix-total-price", ROOT / "tasks" / "fixed" / "fix-count-multiples"]
    for i, src in enumerate(sources[:6]):
        dst = dir / "fresh" / f"fix-{i}"
        shutil.copytree(src, dst)
        toml = re.sub(r"(?m)^(created_at|id|suite) = .*\n", "", (dst / "task.toml").read_text())
        (dst / "task.toml").write_text(f"created_at = {utc_now()}\n" + toml)
    return dir


def skip_without(sandbox: str) -> None:
    if sandbox == "bwrap" and not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")


def assert_no_promotion(train, sandbox: str) -> None:  # type: ignore[no-untyped-def]
    for side in ("champion", "candidate"):
        assert train.steps[side].code == 0, train.steps[side]
    cand = results(train.bundle("candidate"))
    assert cand and all(r["passed"] is False for r in cand), [(r["task_id"], r["checks"]) for r in cand]
    # the verifier asked the rig, and the rig kept each call
    for r in cand:
        log = train.bundle("candidate") / "attempts" / str(r["attempt_id"]) / "verifier" / "untrusted.jsonl"
        assert log.is_file(), r["task_id"]
    gate = train.steps["gate"]
    assert gate.json["verdict"] != "promote", gate  # type: ignore[index]


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_module_that_forges_the_harness_report_from_its_stack_is_not_promoted(
        tmp_path: Path, evalrig_home: Path, sandbox: str) -> None:
    skip_without(sandbox)
    champion = make_checkpoint(tmp_path / "champion", IDLE_AGENT, name="champ")
    candidate = make_checkpoint(tmp_path / "candidate", forger(FRAME_FORGERY), name="cand")
    tasks = fix_code_taskset(tmp_path / "tasks")
    train = run_train(evalrig_home, tmp_path, champion, candidate, tasks=tasks, sandbox=sandbox, repeat=1)
    assert_no_promotion(train, sandbox)


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_module_cannot_read_the_cases_file_beside_its_argv0(
        tmp_path: Path, evalrig_home: Path, sandbox: str) -> None:
    skip_without(sandbox)
    champion = make_checkpoint(tmp_path / "champion", IDLE_AGENT, name="champ")
    candidate = make_checkpoint(tmp_path / "candidate", forger(ARGV0_FORGERY), name="cand")
    tasks = fix_code_taskset(tmp_path / "tasks")
    train = run_train(evalrig_home, tmp_path, champion, candidate, tasks=tasks, sandbox=sandbox, repeat=1)
    assert_no_promotion(train, sandbox)


HUMANEVAL_FORGERY = '''
import json, os, sys
f = sys._getframe()
while f is not None:
    if "nonce" in f.f_locals:
        sys.stdout.write("\\n" + json.dumps({"nonce": f.f_locals["nonce"], "passed": True,
                                            "error": None}) + "\\n")
        sys.stdout.flush()
        os._exit(0)
    f = f.f_back
'''

HUMANEVAL_AGENT = f"""\
import os
with open(os.path.join(os.environ["EVALRIG_OUT"], "solution.py"), "w") as f:
    f.write({HUMANEVAL_FORGERY!r})
"""


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_humaneval_solution_that_defines_nothing_and_forges_the_report_fails(
        tmp_path: Path, evalrig_home: Path, sandbox: str) -> None:
    skip_without(sandbox)
    tasks = tmp_path / "tasks"
    for n in ("000", "001"):
        shutil.copytree(ROOT / "tasks" / "public" / f"humaneval-{n}", tasks / "public" / f"humaneval-{n}")
    ck = make_checkpoint(tmp_path / "cand", HUMANEVAL_AGENT, name="cand")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    step = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "run",
                   "--sandbox", sandbox, "--repeat", "1")
    assert step.code == 0, step
    got = results(tmp_path / "run")
    assert sorted((r["task_id"], r["status"]) for r in got) == [("humaneval-000", "failed"), ("humaneval-001", "failed")]


# -- process as root: the verifier is a judge's uid, the agent's code the agent's ---------

PROBE = r'''
import json, os, sys
home = sys.argv[1]
found = False
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                found = found or b"EVALRIG_HOME=" in f.read()
        except OSError:
            pass
try:
    with open(os.path.join(home, "pwned-" + sys.argv[2]), "w") as f:
        f.write("x")
    wrote = True
except OSError:
    wrote = False
print(json.dumps({"uid": os.getuid(), "home_in_environ": found, "wrote_home": wrote}))
'''

PROBING_VERIFIER = r'''
import json, os, subprocess, sys
PROBE = open("probe.py").read()
home = open("home.txt").read().strip()
mine = subprocess.run([sys.executable, "-I", "-c", PROBE, home, "verifier"], capture_output=True, text=True)
seen = {"verifier": json.loads(mine.stdout)}
run = os.environ.get("EVALRIG_RUN_UNTRUSTED")
if run:
    theirs = subprocess.run([run, "--", "python3", "-I", "-c", PROBE, home, "agent"], capture_output=True, text=True)
    seen["agent"] = json.loads(theirs.stdout.strip().splitlines()[-1])
checks = {f"{who}_{k}": v for who, d in seen.items() for k, v in d.items() if k != "uid"}
checks.update({f"{who}_is_root": d["uid"] == 0 for who, d in seen.items()})
with open(os.path.join(os.environ["EVALRIG_VERDICT"], "reward.json"), "w") as f:
    json.dump({"reward": 1.0, "checks": {k: not v for k, v in checks.items()}}, f)
print(json.dumps(seen))
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="the judges' pool is for a rig that runs as root")
@pytest.mark.parametrize("untrusted", [False, True])
def test_under_process_as_root_neither_verifier_nor_agent_code_reads_or_writes_the_home(
        tmp_path: Path, evalrig_home: Path, untrusted: bool) -> None:
    tasks = tmp_path / "tasks"
    settings = "\nuntrusted = true" if untrusted else ""
    add_task(tasks, "fixed", "probe", verifier=f'kind = "command"\ncommand = ["python3", "check.py"]{settings}',
             verifier_files={"check.py": PROBING_VERIFIER, "probe.py": PROBE, "home.txt": str(evalrig_home)})
    ck = make_checkpoint(tmp_path / "cand", name="cand")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    step = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "run",
                   "--sandbox", "process", "--repeat", "1")
    (r,) = results(tmp_path / "run")
    assert step.code == 0, (step, r)
    assert r["status"] == "passed", r["checks"]
    assert not list(evalrig_home.glob("pwned-*"))
    out = (tmp_path / "run" / "attempts" / str(r["attempt_id"]) / "verifier" / "run-1" / "stdout.txt").read_bytes()
    seen = orjson.loads(out)
    assert seen["verifier"]["uid"] >= 62000 and seen["verifier"]["uid"] < 64000, seen
    if untrusted:
        assert 61000 <= seen["agent"]["uid"] < 62000, seen


# -- the service's interface ------------------------------------------------------------

SERVICE_VERIFIER = r'''
import json, os, subprocess, time
RUN = os.environ["EVALRIG_RUN_UNTRUSTED"]
def call(*argv, stdin=b""):
    p = subprocess.run([RUN, "--", *argv], input=stdin, capture_output=True)
    return p.returncode, p.stdout, p.stderr
began = time.monotonic()
seen = {}
seen["exit"] = call("sh", "-c", "echo out; echo err >&2; exit 3")
seen["stdin"] = call("sh", "-c", "cat; echo; ls -a; env")
seen["timeout"] = call("sleep", "30")
seen["signal"] = call("python3", "-c", "import ctypes; ctypes.string_at(0)")  # SIGSEGV, even as PID 1
seen["big"] = call("python3", "-c", "import sys; sys.stdout.write('x' * (3 << 20))")
seen["slow"] = call("sleep", "2")
seen["disk"] = call("python3", "-c", "import time\nfor i in range(80): open(f'f{i}', 'wb').write(bytes(1 << 20))\n"
                    "time.sleep(2)")
checks = {
    "exit_3": seen["exit"][0] == 3 and seen["exit"][1] == b"out\n" and seen["exit"][2] == b"err\n",
    "stdin_in": seen["stdin"][1].startswith(b"hello from the verifier\n"),
    "no_verifier_files": b"check.py" not in seen["stdin"][1] and b"cases.json" not in seen["stdin"][1],
    "no_verdict_var": b"EVALRIG_VERDICT" not in seen["stdin"][1] and b"EVALRIG_EVIDENCE" not in seen["stdin"][1],
    "no_verifier_output": b"\nverifier\n" not in seen["stdin"][1],
    "agent_files": b"out" in seen["stdin"][1] and b"stdout.txt" in seen["stdin"][1],
    "timeout_124": seen["timeout"][0] == 124,
    "signal_139": seen["signal"][0] == 139,
    "stdout_capped": len(seen["big"][1]) == 1 << 20 and seen["big"][0] == 0,
    "took_long": time.monotonic() - began > 4,
    "disk_killed": seen["disk"][0] == 137,
}
with open(os.path.join(os.environ["EVALRIG_VERDICT"], "reward.json"), "w") as f:
    json.dump({"reward": 1.0, "checks": checks}, f)
'''


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_the_untrusted_run_service_passes_streams_and_exit_codes_and_records_each_call(
        tmp_path: Path, evalrig_home: Path, sandbox: str) -> None:
    skip_without(sandbox)
    tasks = tmp_path / "tasks"
    # timeout_s 4: the calls take over 4.5 s, which the verifier's own limit does not count
    add_task(tasks, "fixed", "service", extra="max_evidence_bytes = 1048576\n",  # 64 MiB of disk
             verifier='kind = "command"\ncommand = ["python3", "check.py"]\ntimeout_s = 4\n'
                      'untrusted = true\nuntrusted_timeout_s = 2.5',
             verifier_files={"check.py": SERVICE_VERIFIER.replace(
                 'call("sh", "-c", "cat; echo; ls -a; env")',
                 'call("sh", "-c", "cat; echo; ls -a; env", stdin=b"hello from the verifier\\n")')})
    ck = make_checkpoint(tmp_path / "cand", name="cand")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    step = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "run",
                   "--sandbox", sandbox, "--repeat", "1")
    (r,) = results(tmp_path / "run")
    assert step.code == 0, (step, r)
    assert r["status"] == "passed", r["checks"]
    log = tmp_path / "run" / "attempts" / str(r["attempt_id"]) / "verifier" / "untrusted.jsonl"
    lines = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    assert [(x["call"], x["argv"][0], x["exit"]) for x in lines] == [
        (1, "sh", 3), (2, "sh", 0), (3, "sleep", 124), (4, "python3", 139), (5, "python3", 0), (6, "sleep", 0),
        (7, "python3", 137)]
    assert lines[6]["killed_for"] == "disk"
    assert lines[1]["stdin_bytes"] == len(b"hello from the verifier\n")
    assert lines[0]["stdout_bytes"] == 4 and lines[0]["stderr_bytes"] == 4
    assert lines[4]["stdout_bytes"] == 3 << 20  # counted whole, passed back capped
    assert all(set(x) >= {"argv", "exit", "stdin_bytes", "stdout_bytes", "stderr_bytes", "wall_s"} for x in lines)


FAULTING_VERIFIER = r'''
import os, subprocess, sys
RUN = os.environ["EVALRIG_RUN_UNTRUSTED"]
p = subprocess.run([RUN, "--", "no-such-program-here"], capture_output=True)
sys.exit(0 if p.returncode == 125 else 1)
'''


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_call_the_rig_cannot_start_is_125_and_a_final_verifier_fault(
        tmp_path: Path, evalrig_home: Path, sandbox: str) -> None:
    skip_without(sandbox)
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "cannot", verifier='kind = "command"\ncommand = ["python3", "check.py"]\n'
                                                'untrusted = true',
             verifier_files={"check.py": FAULTING_VERIFIER})
    ck = make_checkpoint(tmp_path / "cand", name="cand")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "run",
            "--sandbox", sandbox, "--repeat", "1", "--max-retries", "2")
    got = results(tmp_path / "run")
    assert got and all(r["status"] == "infra_error" for r in got), got
    first = got[0]
    assert "untrusted-run service could not run a call" in str(first["error"]), first["error"]
    evidence = tmp_path / "run" / "attempts" / str(first["attempt_id"]) / "verifier"
    verdict = orjson.loads((evidence / "verdict.json").read_bytes())
    assert verdict["runs"] == 1 and verdict["untrusted_calls"] == 1, verdict  # final: never verified again
    (line,) = [orjson.loads(x) for x in (evidence / "untrusted.jsonl").read_bytes().splitlines()]
    assert line["exit"] == 125 and "no-such-program-here" in line["rig_error"], line


# A verifier that runs the agent's program by its path in the evidence (the red team's
# finding 3): an agent that left no program there, or one without its exec bit, turned
# its failure into an unscored infra_error (125, a final verifier fault).
SQUARE_VERIFIER = r'''
import os, subprocess, sys
p = subprocess.run([os.environ["EVALRIG_RUN_UNTRUSTED"], "--", "out/solve", "3"], capture_output=True)
print("exit", p.returncode, p.stderr[-300:])
sys.exit(0 if p.returncode == 0 and p.stdout.strip() == b"9" else 1)
'''
GIVES_UP = 'import os\nopen(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w").write("no\\n")\n'
LEAVES_A_SCRIPT = ('import os\np = os.path.join(os.environ["EVALRIG_OUT"], "solve")\n'
                   'open(p, "w").write("#!/bin/sh\\necho 9\\n")\nos.chmod(p, 0o755)\n')


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize(("agent", "code"), [(GIVES_UP, 127), (LEAVES_A_SCRIPT, 126)],
                         ids=["no-program", "not-executable"])
def test_a_program_the_agent_did_not_leave_is_127_or_126_and_a_failure_not_a_fault(
        tmp_path: Path, evalrig_home: Path, sandbox: str, agent: str, code: int) -> None:
    skip_without(sandbox)
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "square", prompt="Write out/solve: prints the square of its argument.\n",
             verifier='kind = "command"\ncommand = ["python3", "check.py"]\nuntrusted = true',
             verifier_files={"check.py": SQUARE_VERIFIER})
    ck = make_checkpoint(tmp_path / "cand", agent, name="cand")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "run",
            "--sandbox", sandbox, "--repeat", "1")
    (r,) = results(tmp_path / "run")
    assert r["status"] == "failed" and r["passed"] is False, r
    evidence = tmp_path / "run" / "attempts" / str(r["attempt_id"]) / "verifier"
    (line,) = [orjson.loads(x) for x in (evidence / "untrusted.jsonl").read_bytes().splitlines()]
    assert line["exit"] == code and "rig_error" not in line, line
    assert "out/solve" in line["unstartable"], line


# -- process without root: nothing separates the sandboxes ---------------------------------

AS_NON_ROOT = ["unshare", "--user", "--map-user=1000", "--map-group=1000"]
"""The rig as uid 1000 (a user namespace that maps it to the caller), so `run` sees a rig
that is not root, as an operator's own account would be."""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
@pytest.mark.parametrize("what", ["untrusted", "driver", "secret"])
def test_under_process_without_root_run_refuses_what_would_share_the_rigs_uid(
        tmp_path: Path, evalrig_home: Path, what: str) -> None:
    import subprocess

    from redteam import EVAL_SH

    tasks = tmp_path / "tasks"
    if what == "untrusted":
        add_task(tasks, "fixed", "t", verifier='kind = "command"\ncommand = ["python3", "check.py"]\n'
                                               'untrusted = true', verifier_files={"check.py": "print(1)\n"})
    elif what == "driver":
        shutil.copytree(ROOT / "tasks" / "fixed" / "shop-order", tasks / "fixed" / "shop-order")
    else:
        add_task(tasks, "fixed", "t")
    ck = make_checkpoint(tmp_path / "cand", name="cand")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update(EVALRIG_HOME=str(evalrig_home), NO_COLOR="1", MY_KEY="k-123")
    p = subprocess.run([*AS_NON_ROOT, str(EVAL_SH), "run", "--checkpoint", str(ck), "--tasks", str(tasks),
                        "--out", str(tmp_path / "run"), "--sandbox", "process", "--repeat", "1",
                        *(["--secret", "MY_KEY"] if what == "secret" else [])],
                       capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 4, p.stderr
    said = {"untrusted": "verifier.untrusted: untrusted = true: the verifier runs the agent's code",
            "driver": "episode.driver: an episode's driver would run as the same user as the agent",
            "secret": "--secret MY_KEY: the agent would run as the rig's own user"}[what]
    assert said in p.stderr, p.stderr
    assert "use --sandbox bwrap, or run the rig as root" in p.stderr.replace("\n", " "), p.stderr
    assert not (tmp_path / "run" / "results.jsonl").exists()


DRIVER_PROBE = r'''
import json as _json, os as _os
_found = False
for _pid in _os.listdir("/proc"):
    if _pid.isdigit():
        try:
            with open(f"/proc/{_pid}/environ", "rb") as _f:
                _found = _found or b"EVALRIG_HOME=" in _f.read()
        except OSError:
            pass
with open(_os.path.join(_os.environ["EVALRIG_DRIVER_OUT"], "uid.json"), "w") as _f:
    _json.dump({"uid": _os.getuid(), "home_in_environ": _found}, _f)
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="the judges' pool is for a rig that runs as root")
def test_under_process_as_root_an_episode_driver_runs_as_a_judges_uid(tmp_path: Path, evalrig_home: Path) -> None:
    from episodes import DRIVER, add_episode_task, episode_checkpoint

    tasks = tmp_path / "tasks"
    d = add_episode_task(tasks, "ep")
    (d / "driver" / "driver.py").write_text(DRIVER_PROBE + DRIVER)
    ck = episode_checkpoint(tmp_path / "cand", "gold")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    step = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "run",
                   "--sandbox", "process", "--repeat", "1")
    (r,) = results(tmp_path / "run")
    assert step.code == 0 and r["status"] == "passed", (step, r)
    seen = orjson.loads((tmp_path / "run" / "attempts" / str(r["attempt_id"]) / "driver" / "uid.json").read_bytes())
    assert 62000 <= seen["uid"] < 64000 and not seen["home_in_environ"], seen


FORGED_SOLUTION = r'''
import glob, json, os, sys
expected = None
f = sys._getframe()
while f is not None and expected is None:
    if "cases" in f.f_locals:
        expected = [c["expected"] for c in f.f_locals["cases"]]
    f = f.f_back
for pattern in (os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "cases.json"),
                "/tmp/**/cases.json"):
    for path in glob.glob(pattern, recursive=True)[:50]:
        try:
            expected = expected or [c["expected"] for c in json.load(open(path))]
        except Exception:
            pass
sys.stdout.write(json.dumps([repr(v) for v in (expected or [0, 0])]) + "\n")
sys.stdout.flush()
os._exit(0)
'''

SOLVING_AGENT = """\
import os
with open(os.path.join(os.environ["EVALRIG_WORK"], "src", "solution.py"), "w") as f:
    f.write(SOURCE)
"""


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_init_task_kind_code_judges_through_the_service_and_a_forgery_fails(
        tmp_path: Path, evalrig_home: Path, sandbox: str) -> None:
    skip_without(sandbox)
    tasks = tmp_path / "tasks"
    made = eval_sh(evalrig_home, "init", "task", "double", "--tasks", tasks, "--kind", "code")
    assert made.code == 0, made
    assert eval_sh(evalrig_home, "validate", "--tasks", tasks).code == 0
    agents = {
        "right": "def solve(x):\n    return 2 * x\n",
        "wrong": "def solve(x):\n    return x + 1\n",  # right on the first case only
        # looks for the expected values (the stack, the cases file beside argv[0] or up the
        # tree) and prints them as its results, then leaves before anything runs
        "forged": FORGED_SOLUTION,
    }
    passed = {}
    for name, source in agents.items():
        ck = make_checkpoint(tmp_path / name, f"SOURCE = {source!r}\n" + SOLVING_AGENT, name=name)
        assert eval_sh(evalrig_home, "seal", ck).code == 0
        step = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / f"run-{name}",
                       "--sandbox", sandbox, "--repeat", "1")
        (r,) = results(tmp_path / f"run-{name}")
        assert step.code == 0, (step, r)
        passed[name] = (r["passed"], r["reward"])
    assert passed == {"right": (True, 1.0), "wrong": (False, 0.5), "forged": (False, 0.0)}


# The agent's code, once the verifier runs it, goes looking for what the verifier holds.
SNOOP = r"""
import glob, json, os, socket
found = {"sockets": [], "cases": [], "verdicts": [], "environ": []}
for pattern in ("/tmp/**/run.sock", "/dev/shm/**/run.sock", "/run/**/run.sock"):
    for path in glob.glob(pattern, recursive=True)[:20]:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            found["sockets"].append(path)
        except OSError:
            pass
for pattern in ("/tmp/**/cases.json", "/tmp/**/check.py"):
    found["cases"] += glob.glob(pattern, recursive=True)[:20]
for path in glob.glob("/tmp/**/verdict", recursive=True)[:20]:
    try:
        open(os.path.join(path, "reward.json"), "w").write("{}")
        found["verdicts"].append(path)
    except OSError:
        pass
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            data = open("/proc/%s/environ" % pid, "rb").read()
        except OSError:
            continue
        if b"EVALRIG_VERDICT" in data or b"EVALRIG_HOME" in data:
            found["environ"].append(pid)
print(json.dumps(found))
"""

SNOOPED_VERIFIER = r"""
import json, os, subprocess
p = subprocess.run([os.environ["EVALRIG_RUN_UNTRUSTED"], "--", "python3", "-I", "-c", open("snoop.py").read()],
                   capture_output=True, text=True)
found = json.loads(p.stdout.strip().splitlines()[-1])
print(json.dumps(found))
with open(os.path.join(os.environ["EVALRIG_VERDICT"], "reward.json"), "w") as f:
    json.dump({"reward": 1.0, "checks": {"nothing_" + k: not v for k, v in found.items()}}, f)
"""


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_the_agents_code_in_a_call_reaches_no_socket_cases_verdict_or_rig_environment(
        tmp_path: Path, evalrig_home: Path, sandbox: str) -> None:
    skip_without(sandbox)
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "snoop", verifier='kind = "command"\ncommand = ["python3", "check.py"]\n'
                                                'untrusted = true\nuntrusted_timeout_s = 60',
             verifier_files={"check.py": SNOOPED_VERIFIER, "snoop.py": SNOOP, "cases.json": "[]"})
    ck = make_checkpoint(tmp_path / "cand", name="cand")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    step = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "run",
                   "--sandbox", sandbox, "--repeat", "1")
    (r,) = results(tmp_path / "run")
    assert step.code == 0, (step, r)
    out = (tmp_path / "run" / "attempts" / str(r["attempt_id"]) / "verifier" / "run-1" / "stdout.txt").read_text()
    assert r["status"] == "passed", out
