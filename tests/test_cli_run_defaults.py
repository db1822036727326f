"""`run` takes defaults for --tasks, --policy, --repeat, --jobs and --sandbox from
evalrig.toml (or [tool.evalrig] in pyproject.toml) in the working directory; flags win, and
the manifest records which file supplied what (docs/release-flow.md, "Defaults from a file")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents.run_kit import cli, make_checkpoint, make_tasks

from evalrig.store.bundle import load_run
from evalrig.store.files import sha256_file


@pytest.fixture
def kit(tmp_path: Path, evalrig_home: Path) -> tuple[Path, Path]:
    return make_checkpoint(tmp_path, evalrig_home), make_tasks(tmp_path, 2)


def test_evalrig_toml_supplies_what_no_flag_gives_and_the_manifest_says_so(
        kit, tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck, tasks = kit
    work = tmp_path / "release"
    work.mkdir()
    policy = repo_root / "policies" / "default.toml"
    (work / "evalrig.toml").write_text(
        f'tasks = "../{tasks.name}"\npolicy = "{policy}"\nrepeat = 3\njobs = 2\nsandbox = "process"\n')
    monkeypatch.chdir(work)
    r = cli("run", "--checkpoint", ck, "--out", tmp_path / "b", "--repeat", "2")  # the flag wins
    assert r.exit_code == 0, r.stderr
    m = load_run(tmp_path / "b").manifest
    assert m.repeat == 2 and m.settings.jobs == 2 and m.settings.sandbox == "process"
    assert Path(m.settings.tasks_dir) == tasks.resolve()
    assert m.policy_pin is not None and m.policy_pin.digest == sha256_file(policy)
    assert m.defaults is not None and m.defaults.file == str((work / "evalrig.toml").resolve())
    assert m.defaults.supplied == ["jobs", "policy", "sandbox", "tasks"]


def test_pyproject_tool_evalrig_is_read_when_there_is_no_evalrig_toml(
        kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck, tasks = kit
    (tmp_path / "pyproject.toml").write_text(
        f'[project]\nname = "x"\n\n[tool.evalrig]\ntasks = "{tasks}"\nrepeat = 1\nsandbox = "process"\n')
    monkeypatch.chdir(tmp_path)
    r = cli("run", "--checkpoint", ck, "--out", tmp_path / "b", "--jobs", "2")
    assert r.exit_code == 0, r.stderr
    m = load_run(tmp_path / "b").manifest
    assert m.repeat == 1 and m.defaults is not None
    assert m.defaults.supplied == ["repeat", "sandbox", "tasks"] and m.defaults.file.endswith("pyproject.toml")


def test_without_a_defaults_file_the_manifest_has_no_defaults_key(
        kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck, tasks = kit
    monkeypatch.chdir(tmp_path)
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--repeat", "1",
            "--jobs", "2", "--sandbox", "process")
    assert r.exit_code == 0, r.stderr
    assert "defaults" not in json.loads((tmp_path / "b" / "manifest.json").read_text())


@pytest.mark.parametrize(("text", "field"), [
    ("repeat = 0\n", "repeat"),
    ('sandbox = "docker"\n', "sandbox"),
    ("retries = 3\n", "retries"),
])
def test_a_bad_defaults_file_is_refused_naming_the_key(kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        text: str, field: str) -> None:
    ck, tasks = kit
    (tmp_path / "evalrig.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b")
    assert r.exit_code == 4, r.stderr
    assert "evalrig.toml" in r.stderr and field in r.stderr, r.stderr
    assert not (tmp_path / "b").exists()
