"""`evalrig init task` and `init checkpoint` write files that validate at once and never
overwrite (issue 12, item 11)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import orjson
import pytest
from agents.run_kit import cli


@pytest.mark.parametrize("suite", ["fixed", "fresh", "invariant"])
def test_init_task_then_validate_exits_0(tmp_path: Path, suite: str) -> None:
    tasks = tmp_path / "tasks"
    r = cli("init", "task", "parse-dates", "--tasks", tasks, "--suite", suite)
    assert r.exit_code == 0, r.output
    toml = tasks / suite / "parse-dates" / "task.toml"
    assert toml.is_file() and (toml.parent / "prompt.md").is_file()
    assert r.stdout.startswith(f"wrote task parse-dates in {toml.parent}\n")
    r = cli("validate", "--tasks", tasks)
    assert r.exit_code == 0, r.output
    assert r.stdout == "ok: tasks: 1\n"


def test_init_task_explains_every_field_in_a_comment(tmp_path: Path) -> None:
    cli("init", "task", "t", "--tasks", tmp_path, "--suite", "fresh")
    text = (tmp_path / "fresh" / "t" / "task.toml").read_text()
    doc = tomllib.loads(text)
    assert {"created_at", "tags", "timeout_s", "max_output_bytes", "max_evidence_bytes", "network",
            "evidence", "resources", "verifier"} == set(doc)
    # every paragraph that sets a field opens with a comment saying what it does
    for paragraph in text.split("\n\n"):
        sets = [line for line in paragraph.splitlines() if " = " in line and not line.startswith("#")]
        body = [line for line in paragraph.splitlines() if not line.startswith("[")]
        assert not sets or body[0].startswith("#"), paragraph


def test_init_task_refuses_to_overwrite_naming_the_path(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    assert cli("init", "task", "x", "--tasks", tasks).exit_code == 0
    before = (tasks / "fixed" / "x" / "task.toml").read_text()
    (tasks / "fixed" / "x" / "task.toml").write_text(before + "# mine\n")
    r = cli("init", "task", "x", "--tasks", tasks)
    assert r.exit_code == 4
    assert r.stderr.startswith(f"error: {tasks / 'fixed' / 'x'}: already exists")
    assert (tasks / "fixed" / "x" / "task.toml").read_text().endswith("# mine\n")
    # the same id in another suite would break the set (ids are unique): refused too
    r = cli("init", "task", "x", "--tasks", tasks, "--suite", "fresh", "--json")
    assert r.exit_code == 4 and orjson.loads(r.stdout)["error"]["file"] == str(tasks / "fixed" / "x")
    assert not (tasks / "fresh").exists()


@pytest.mark.parametrize("name", ["..", "a/b", "with space"])
def test_init_task_with_a_name_that_is_no_id_is_a_usage_error(tmp_path: Path, name: str) -> None:
    r = cli("init", "task", name, "--tasks", tmp_path / "tasks")
    assert r.exit_code == 2 and "a name is letters" in r.stderr
    assert not (tmp_path / "tasks").exists()


def test_init_checkpoint_then_validate_seal_and_run(tmp_path: Path) -> None:
    ck = tmp_path / "my-agent"
    r = cli("init", "checkpoint", ck)
    assert r.exit_code == 0, r.output
    assert tomllib.loads((ck / "checkpoint.toml").read_text())["name"] == "my-agent"
    r = cli("validate", "--checkpoint", ck)
    assert r.exit_code == 0, r.output
    assert r.stdout == "ok: checkpoints: 1\n" and "not sealed" in r.stderr  # sealing is the next step
    tasks = tmp_path / "tasks"
    assert cli("init", "task", "t", "--tasks", tasks).exit_code == 0
    assert cli("seal", ck).exit_code == 0
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--repeat", "1",
            "--sandbox", "process", "--json")
    assert r.exit_code == 0, r.output
    counts = orjson.loads(r.stdout)["counts"]
    assert counts["failed"] == 1 and counts["agent_error"] == 0  # the agent ran; its answer is a placeholder


def test_init_checkpoint_takes_a_name(tmp_path: Path) -> None:
    assert cli("init", "checkpoint", tmp_path / "d", "--name", "demo-agent").exit_code == 0
    assert tomllib.loads((tmp_path / "d" / "checkpoint.toml").read_text())["name"] == "demo-agent"


@pytest.mark.parametrize("existing", ["checkpoint.toml", "agent.py"])
def test_init_checkpoint_refuses_to_overwrite_naming_the_path(tmp_path: Path, existing: str) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / existing).write_text("mine\n")
    r = cli("init", "checkpoint", ck)
    assert r.exit_code == 4
    assert r.stderr.startswith(f"error: {ck / existing}: already exists")
    assert (ck / existing).read_text() == "mine\n" and len(list(ck.iterdir())) == 1


def test_init_commands_have_help_with_an_example() -> None:
    for name in ("task", "checkpoint"):
        r = cli("init", name, "--help")
        assert r.exit_code == 0 and f"evalrig init {name} " in r.stdout.split("Example", 1)[1]
        assert "--json" in r.stdout and "--quiet" in r.stdout


def test_init_task_kind_code_writes_the_verifier_docs_tasks_md_shows(tmp_path: Path) -> None:
    """The example in docs/tasks.md is the file `init task --kind code` writes, byte for byte."""
    from evalrig.store.scaffold import CODE_CHECK_PY

    r = cli("init", "task", "double", "--tasks", str(tmp_path / "tasks"), "--kind", "code")
    assert r.exit_code == 0, r.output
    task = tmp_path / "tasks" / "fixed" / "double"
    assert (task / "verifier" / "check.py").read_text() == CODE_CHECK_PY
    assert tomllib.loads((task / "task.toml").read_text())["verifier"] == {
        "kind": "command", "command": ["python3", "check.py"], "timeout_s": 60, "untrusted": True,
        "untrusted_timeout_s": 10, "version": "1"}
    docs = (Path(__file__).resolve().parent.parent / "docs" / "tasks.md").read_text()
    section = docs[docs.index("#### A verifier never runs the agent's code itself"):]
    block = section[section.index("```python\n") + len("```python\n"):]
    assert block[:block.index("```\n")] == CODE_CHECK_PY
    assert cli("validate", "--tasks", str(tmp_path / "tasks")).exit_code == 0
