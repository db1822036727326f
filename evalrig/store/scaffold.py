"""`evalrig init`: a new task folder or checkpoint directory that validates as written.

Every file is written with its fields spelled out and a comment on each, so that the file
itself teaches the format (docs/tasks.md and docs/checkpoint.md are the references). Nothing
is ever overwritten: a file or task that exists is refused (exit 4) before anything is
written.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from evalrig.core.errors import UsageError, invalid
from evalrig.models.base import PATH_ID_PATTERN, format_ts
from evalrig.models.inputs import SUITES

SUITE_NOTES = {
    "fixed": ("# Suite: fixed, the regression suite. It only grows: `evalrig lock --tasks DIR` records\n"
              "# this task's digest, and from then on it may not be edited or removed."),
    "fresh": ("# Suite: fresh, made for one release train after the candidate was sealed, retired after\n"
              "# it; the gate's win is measured on these."),
    "invariant": ("# Suite: invariant, tasks every build must pass (the policy's `invariant-suite` check);\n"
                  "# one failure blocks a release."),
    "public": ("# Suite: public, a public benchmark's problem: compared and reported in every comparison,\n"
               "# read by no rule of the gate (docs/curves.md)."),
}

TASK_TOML = """\
# task.toml: one task of the set; docs/tasks.md explains every field.
{suite_note}
# The folder name ({name}) is the task's id and the parent folder its suite; `id = "..."`
# here would give another id (unique in the set), `suite` must agree with the folder.
{created_at}
# Labels to select tasks by (`evalrig run --tag T`) and to group results in reports.
tags = []

# The agent's wall-clock limit for one attempt, in seconds (`run --timeout-scale` scales it).
timeout_s = 60

# Cap on the agent's stdout and, separately, its stderr, in bytes (1 MiB).
max_output_bytes = 1048576

# Cap on the evidence kept from one attempt, in bytes (64 MiB).
max_evidence_bytes = 67108864

# Whether the agent may reach the network on this task (`run --allow-network` must grant it).
network = false

# Extra files kept as evidence, as globs relative to the attempt root, e.g. "work/**/*.py"
# (out/, stdout.txt and stderr.txt are always kept).
evidence = {evidence}

[resources]
# What one attempt needs: CPUs (for executors that schedule attempts), the agent's
# address-space limit in MiB, and its process-count limit.
cpus = 1
memory_mb = 4096
max_processes = 256

[verifier]
# How an answer is judged. kind is one of:
#   exact    `expected`: the trimmed out/answer.txt must equal it
#   regex    `pattern`: must match the whole trimmed out/answer.txt
#   json     `expected` (any TOML value): out/answer.json must equal it
#   command  `command = ["python3", "check.py"]`, run from verifier/; it writes
#            $EVALRIG_VERDICT/reward.json (or exits 0 to pass, 1 to fail); an exit 1 after a
#            Python traceback is the verifier's crash, a fault, never a fail (docs/tasks.md)
{verifier}# Part of the verifier's identity: bump it when the way answers are judged changes.
version = "1"
"""

EXACT_VERIFIER = """\
kind = "exact"
expected = "TODO: the answer"
"""

CODE_VERIFIER = """\
kind = "command"
command = ["python3", "check.py"]
# The verifier's own wall-clock limit, in seconds; time inside untrusted calls is not counted.
timeout_s = 60
# The verifier runs the agent's code, so only through $EVALRIG_RUN_UNTRUSTED: the rig runs
# it in a fresh sandbox as the agent, and the verifier compares what comes back (docs/tasks.md,
# "A verifier never runs the agent's code itself"). Each call's limit, in seconds:
untrusted = true
untrusted_timeout_s = 10
"""

CODE_PROMPT = """\
{name}: replace this text with what the agent is asked.

This file is the only text of the task the agent sees (its path is in $EVALRIG_PROMPT).
Implement `solve` in work/src/solution.py; hidden cases check it (verifier/cases.json).
"""

CODE_SOLUTION = '''\
def solve(x):
    """The function the agent is asked to write (replace with the task's starting code)."""
    raise NotImplementedError
'''

CODE_CASES = """\
[
  {"args": [1], "expected": 2},
  {"args": [20], "expected": 40}
]
"""

CODE_CHECK_PY = '''\
"""A code task's verifier: the agent's code runs only through $EVALRIG_RUN_UNTRUSTED (docs/tasks.md)."""
import ast, json, os, subprocess, sys
from pathlib import Path

MODULE, FUNCTION = "work/src/solution.py", "solve"  # the agent's file, in its evidence
# Runs as the agent, in a fresh sandbox on a copy of its evidence: arguments in, reprs out.
RUNNER = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("solution", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
out = []
for args in json.loads(sys.stdin.read()):
    try:
        out.append(repr(getattr(module, sys.argv[2])(*args)))
    except Exception:
        out.append(None)
print(json.dumps(out))
"""

def value(text):  # what the agent's function returned, read back as a literal, never eval'd
    try:
        return True, ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None

cases = json.loads(Path("cases.json").read_text())  # the expected values never leave this process
run = subprocess.run([os.environ["EVALRIG_RUN_UNTRUSTED"], "--", "python3", "-I", "-c", RUNNER, MODULE, FUNCTION],
                     input=json.dumps([c["args"] for c in cases]).encode(), capture_output=True)
lines = run.stdout.decode(errors="replace").strip().splitlines() or ["[]"]
try:
    got = json.loads(lines[-1])
except ValueError:
    got = []
got = [value(g) if isinstance(g, str) else (False, None) for g in (got if isinstance(got, list) else [])]
passed = sum(ok and type(v) is type(c["expected"]) and v == c["expected"] for c, (ok, v) in zip(cases, got))
checks = {"ran": run.returncode == 0, "all_cases_pass": passed == len(cases)}
reward = {"reward": passed / len(cases), "checks": checks}
# The verdict goes in reward.json, never in the exit code: an uncaught exception above
# exits 1 with a traceback, which the rig takes for this verifier's crash (a fault), not a fail.
Path(os.environ["EVALRIG_VERDICT"], "reward.json").write_text(json.dumps(reward) + "\\n")
sys.exit(0)
'''

PROMPT = """\
{name}: replace this text with what the agent is asked.

This file is the only text of the task the agent sees (its path is in $EVALRIG_PROMPT).
Say what the answer is and where it goes: the answer in out/answer.txt.
"""

CHECKPOINT_TOML = """\
# checkpoint.toml: how the rig starts this agent; docs/checkpoint.md explains every field.
# Before a run, seal the directory: `evalrig seal {dir}` (a changed file needs a new seal).

# The agent's name, shown beside its content id in verdicts.
name = "{name}"

[agent]
# The command run once per attempt, from a fresh copy of this directory (an argv, no
# shell). It reads the prompt from the file named by $EVALRIG_PROMPT and writes its answer
# to $EVALRIG_OUT/answer.txt (or answer.json); docs/agents.md lists all it is given.
command = ["python3", "agent.py"]

# Optional: a command printing one JSON object, the agent's own estimate before an attempt.
# estimate = ["python3", "agent.py", "--estimate"]

# Settings pinned for every attempt, passed as environment variables; part of the
# checkpoint's identity (a model name, a temperature). E.g. env = {{ MODEL = "m-2026-10" }}
env = {{}}

# Whether the agent may reach the network (`run --allow-network` must grant it too).
network = false

[history]
# Optional: an append-only event log inside this directory, copied into each run bundle
# and checked by the policy's `history-preserved` rule. E.g. log = "state/events.jsonl"
"""

AGENT_PY = '''\
"""A minimal evalrig agent: it reads the task's prompt and writes an answer.

Replace the body with your agent. docs/agents.md says what it is given ($EVALRIG_PROMPT,
$EVALRIG_WORK, $EVALRIG_OUT, $EVALRIG_SEED, ...) and what counts as a failure.
"""

import os
import pathlib

prompt = pathlib.Path(os.environ["EVALRIG_PROMPT"]).read_text()
answer = prompt.strip().splitlines()[0] if prompt.strip() else ""
(pathlib.Path(os.environ["EVALRIG_OUT"]) / "answer.txt").write_text(answer + "\\n")
'''


def _check_name(name: str, what: str) -> None:
    if not re.fullmatch(PATH_ID_PATTERN, name):
        raise UsageError(f"{what} {name!r}: a name is letters, digits, '.', '_' and '-' (not . or ..)")


def _refuse_existing(paths: list[Path], hint: str) -> None:
    for p in paths:
        if p.exists() or p.is_symlink():
            raise invalid("already exists; `evalrig init` never overwrites", file=p, hint=hint)


def _write_new(files: dict[Path, str]) -> list[Path]:
    """Create every file (mode "x": one made meanwhile is refused, never replaced)."""
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with path.open("x", encoding="utf-8") as f:
                f.write(text)
        except FileExistsError:
            raise invalid("already exists; `evalrig init` never overwrites", file=path) from None
        except OSError as e:
            raise invalid(f"cannot write it ({e.strerror})", file=path,
                          hint="choose a directory you can write") from None
    return list(files)


KINDS = ("exact", "code")


def scaffold_task(tasks_dir: Path, name: str, suite: str, now: datetime, kind: str = "exact") -> list[Path]:
    """Write tasks_dir/suite/name/{task.toml, prompt.md}; `kind` "code" also a starting
    module (files/src/solution.py) and a verifier that runs it only through the untrusted-run
    service (verifier/check.py, cases.json). Returns the paths written."""
    if kind not in KINDS:
        raise UsageError(f"--kind {kind}: expected one of {', '.join(KINDS)}")
    _check_name(name, "task")
    if suite not in SUITES:
        raise UsageError(f"--suite {suite}: expected one of {', '.join(SUITES)}")
    if tasks_dir.exists() and not tasks_dir.is_dir():
        raise invalid("not a directory (expected a task set)", file=tasks_dir)
    same_id = [tasks_dir / s / name for s in SUITES]
    _refuse_existing(same_id, hint="task ids are unique in a task set; choose another name")
    task_dir = tasks_dir / suite / name
    created_at = ("# When the task was made (UTC): required of fresh tasks, and it must be after\n"
                  f"# the candidate's seal.\ncreated_at = {format_ts(now)}\n") if suite == "fresh" else ""
    code = kind == "code"
    files = {
        task_dir / "task.toml": TASK_TOML.format(
            suite_note=SUITE_NOTES[suite], name=name, created_at=created_at,
            evidence='["work/**/*.py"]' if code else "[]", verifier=CODE_VERIFIER if code else EXACT_VERIFIER),
        task_dir / "prompt.md": (CODE_PROMPT if code else PROMPT).format(name=name),
    }
    if code:
        files.update({task_dir / "files" / "src" / "solution.py": CODE_SOLUTION,
                      task_dir / "verifier" / "check.py": CODE_CHECK_PY,
                      task_dir / "verifier" / "cases.json": CODE_CASES})
    return _write_new(files)


def scaffold_checkpoint(dir: Path, name: str | None) -> list[Path]:
    """Write dir/{checkpoint.toml, agent.py}; return the paths written."""
    name = name if name is not None else dir.resolve().name
    if not name.strip() or '"' in name or "\\" in name or "\n" in name:
        raise UsageError(f"--name {name!r}: give a name without quotes, backslashes or newlines")
    if dir.exists() and not dir.is_dir():
        raise invalid("not a directory", file=dir, hint="give a directory (new, or one without these files)")
    files = {dir / "checkpoint.toml": CHECKPOINT_TOML.format(name=name, dir=dir),
             dir / "agent.py": AGENT_PY}
    _refuse_existing(list(files), hint="init writes checkpoint.toml and agent.py into a directory "
                     "that has neither; move them away or choose another directory")
    return _write_new(files)

