"""What people expect of a CLI (issue 12, item 12): shell completion, --quiet, --json on
usage errors too, and --version --json."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from agents.run_kit import cli, make_checkpoint, make_tasks

from evalrig import __version__


def test_version_json() -> None:
    for args in (["--version", "--json"], ["--json", "--version"]):
        r = cli(*args)
        assert r.exit_code == 0, r.output
        doc = orjson.loads(r.stdout)
        assert doc["name"] == "evalrig" and doc["version"] == __version__ and doc["python"]


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["validate", "--bogus", "--json"], None, "No such option: --bogus"),
        (["run", "--json"], "--out", "Missing option '--out'"),
        (["run", "--out", "b", "--repeat", "0", "--json"], "--repeat", "'--repeat'"),
        (["--json", "no-such-command"], None, "No such command 'no-such-command'"),
        (["seal", "--json"], "CHECKPOINT_DIR", "Missing argument"),
    ],
)
def test_a_usage_error_under_json_is_a_json_error_object_on_stdout(
        args: list[str], field: str | None, words: str) -> None:
    r = cli(*args)
    assert r.exit_code == 2, r.output
    e = orjson.loads(r.stdout)["error"]
    assert e["code"] == 2 and words in e["message"] and e["field"] == field
    assert e["hint"].startswith("see `evalrig") and e["hint"].endswith(" --help`")
    assert words in r.stderr  # the person reading the terminal is told too


def test_a_usage_error_without_json_leaves_stdout_empty() -> None:
    r = cli("validate", "--bogus")
    assert r.exit_code == 2 and r.stdout == "" and "No such option" in r.stderr


def test_json_after_double_dash_is_not_the_flag() -> None:
    r = cli("seal", "--", "--json")
    assert r.exit_code == 4 and r.stdout == ""  # a checkpoint directory named --json, missing


def test_json_given_before_the_command_counts(tmp_path: Path) -> None:
    r = cli("--json", "seal", tmp_path / "missing")
    assert r.exit_code == 4
    assert orjson.loads(r.stdout)["error"]["file"] == str(tmp_path / "missing")


@pytest.fixture
def kit(tmp_path: Path, evalrig_home: Path) -> tuple[Path, Path]:
    return make_checkpoint(tmp_path, evalrig_home), make_tasks(tmp_path, 2)


@pytest.mark.parametrize("where", ["global", "command"])
def test_quiet_run_prints_only_its_status(kit: tuple[Path, Path], tmp_path: Path, where: str) -> None:
    ck, tasks = kit
    args = ["run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--repeat", "1",
            "--sandbox", "process", "--jobs", "1"]
    r = cli(*(["-q", *args] if where == "global" else [*args, "--quiet"]))
    assert r.exit_code == 0, r.output
    assert r.stderr == ""  # no "running 2 trials", no progress line
    assert len(r.stdout.splitlines()) == 1 and r.stdout.endswith(": complete\n")


def test_quiet_never_hides_errors_or_the_json_result(kit: tuple[Path, Path], tmp_path: Path) -> None:
    ck, tasks = kit
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--task", "nope", "-q")
    assert r.exit_code == 4 and "--task nope" in r.stderr
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--repeat", "1",
            "--sandbox", "process", "-q", "--json")
    assert r.exit_code == 0 and orjson.loads(r.stdout)["status"] == "complete"


def test_quiet_seal_prints_the_one_line_that_says_what_happened(kit: tuple[Path, Path]) -> None:
    ck, _ = kit
    r = cli("seal", ck, "--quiet")
    assert r.exit_code == 0 and r.stdout == f"already sealed (the first sealing counts): {ck}\n"


def test_completion_is_offered_for_bash_zsh_and_fish(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without this, typer finds the shell from the parent processes (what a person wants)
    # and takes no shell name.
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    for shell, marker in (("bash", "complete -o default -F _evalrig_completion evalrig"),
                          ("zsh", "compdef _evalrig_completion evalrig"),
                          ("fish", "complete --command evalrig")):
        r = cli("--show-completion", shell)
        assert r.exit_code == 0, r.output
        assert marker in r.stdout and "_EVALRIG_COMPLETE" in r.stdout


def test_completion_completes_commands_and_choices() -> None:
    """What the installed bash script asks the program, through the real entry point."""
    def complete(words: str) -> list[str]:
        env = {**os.environ, "_EVALRIG_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split(" ")) - 1)}
        r = subprocess.run([str(Path(sys.executable).parent / "evalrig")], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert complete("evalrig che") == ["check-release"]
    assert complete("evalrig run --sandbox ") == ["auto", "bwrap", "process"]
