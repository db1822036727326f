"""Builders for the runner's tests: a sealed checkpoint and a task set on real files."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from evalrig.store.checkpoint import seal

AGENTS = Path(__file__).resolve().parent
SEALED_AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def make_checkpoint(root: Path, home: Path, *, history: str | None = None,
                    do_seal: bool = True, name: str = "exo") -> Path:
    d = root / f"ckpt-{name}"
    d.mkdir(parents=True)
    shutil.copy(AGENTS / "run_agent.py", d / "agent.py")
    text = f'name = "{name}"\n[agent]\ncommand = ["python3", "agent.py"]\n'
    if history is not None:
        (d / "state").mkdir()
        (d / "state" / "events.jsonl").write_text(history)
        text += '[history]\nlog = "state/events.jsonl"\n'
    (d / "checkpoint.toml").write_text(text)
    if do_seal:
        seal(d, home, SEALED_AT)
    return d


def add_task(tasks: Path, task_id: str, prompt: str, *, suite: str = "fixed",
             expected: str = "even", crash_verifier: bool = False, tags: list[str] | None = None,
             timeout_s: float = 20) -> Path:
    d = tasks / suite / task_id
    d.mkdir(parents=True)
    (d / "prompt.md").write_text(prompt)
    lines = [f"timeout_s = {timeout_s}"]
    if suite == "fresh":
        lines.append("created_at = 2026-12-01T10:00:00.000000Z")
    if tags:
        lines.append("tags = [" + ", ".join(f'"{t}"' for t in tags) + "]")
    if crash_verifier:
        (d / "verifier").mkdir()
        shutil.copy(AGENTS / "run_verifier_crash.py", d / "verifier" / "crash.py")
        lines += ["[verifier]", 'kind = "command"', 'command = ["python3", "crash.py"]']
    else:
        lines += ["[verifier]", 'kind = "exact"', f'expected = "{expected}"']
    (d / "task.toml").write_text("\n".join(lines) + "\n")
    return d


def make_tasks(root: Path, n: int = 6, prompt: str = "answer: parity\n") -> Path:
    tasks = root / "tasks"
    for i in range(n):
        add_task(tasks, f"t{i}", prompt, suite="fresh" if i % 2 else "fixed")
    return tasks


def cli(*args: str | Path) -> object:
    """Run the CLI in-process; returns typer's Result (exit_code, stdout, stderr)."""
    from typer.testing import CliRunner

    from evalrig.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def results_by_trial(bundle: Path) -> dict[str, str]:
    """trial_id → status of the result that counts."""
    from evalrig.store.bundle import final_results, load_run

    return {k: r.status for k, r in final_results(load_run(bundle)).items()}
