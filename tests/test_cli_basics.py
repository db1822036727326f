"""What every command shares: help with an example, --json/--debug, exit codes 2 and 6."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import typer
from typer.testing import CliRunner

from evalrig import __version__
from evalrig.cli import app
from evalrig.cli.app import DebugOpt, JsonOpt, command


def command_names() -> list[str]:
    return sorted(c.name for c in app.registered_commands if c.name)


def test_there_are_commands() -> None:
    assert {"seal", "lock", "validate", "schema"} <= set(command_names())


@pytest.mark.parametrize("name", command_names())
def test_every_command_has_help_with_an_example(name: str) -> None:
    r = CliRunner().invoke(app, [name, "--help"], env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    assert "Example" in r.stdout
    assert f"evalrig {name}" in r.stdout.split("Example", 1)[1]
    assert "--json" in r.stdout and "--debug" in r.stdout


@pytest.mark.parametrize("name", command_names())
def test_every_command_takes_json_and_debug(name: str) -> None:
    cmd = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    opts = {o for p in cmd.params for o in p.opts}
    assert {"--json", "--debug"} <= opts


def test_version() -> None:
    r = CliRunner().invoke(app, ["--version"])
    assert (r.exit_code, r.stdout) == (0, f"evalrig {__version__}\n")


def test_no_arguments_shows_help() -> None:
    r = CliRunner().invoke(app, [])
    assert r.exit_code in (0, 2)
    assert "Usage" in r.output


@pytest.mark.parametrize(
    "args",
    [["seal"], ["validate", "--bogus"], ["no-such-command"], ["lock", "--tasks"], ["schema", "nope"]],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output


@pytest.fixture
def broken_command() -> Iterator[str]:
    """A command with a bug in it, registered for one test and then removed."""
    before = list(app.registered_commands)

    @command("broken-for-test", "evalrig broken-for-test")
    def broken(json_out: JsonOpt = False, debug: DebugOpt = False) -> int:
        """Fails the way a bug does."""
        return {}["missing"]  # type: ignore[no-any-return]

    yield "broken-for-test"
    app.registered_commands[:] = before


def test_internal_error_exits_6_without_traceback(broken_command: str) -> None:
    r = CliRunner().invoke(app, [broken_command])
    assert r.exit_code == 6
    assert "Traceback" not in r.output
    assert r.stderr.startswith("internal error: KeyError: 'missing'\n")
    assert "rerun with --debug" in r.stderr


def test_internal_error_with_debug_shows_the_traceback(broken_command: str) -> None:
    r = CliRunner().invoke(app, [broken_command, "--debug"])
    assert r.exit_code == 6
    assert "Traceback (most recent call last)" in r.stderr
    assert 'return {}["missing"]' in r.stderr


def test_invalid_input_with_debug_shows_the_traceback(tmp_path: object) -> None:
    r = CliRunner().invoke(app, ["seal", "/nonexistent/checkpoint", "--debug"])
    assert r.exit_code == 4
    assert "Traceback" in r.stderr
    r = CliRunner().invoke(app, ["seal", "/nonexistent/checkpoint"])
    assert r.exit_code == 4 and "Traceback" not in r.stderr


def test_json_error_report_on_stdout() -> None:
    import json

    r = CliRunner().invoke(app, ["seal", "/nonexistent/checkpoint", "--json"])
    assert r.exit_code == 4
    assert json.loads(r.stdout)["error"]["file"] == "/nonexistent/checkpoint"


def test_console_script_runs_as_a_process() -> None:
    """The real entry point, not only the in-process runner: exit codes survive."""
    r = subprocess.run([sys.executable, "-m", "evalrig", "seal", "/nonexistent/c"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 4
    assert r.stderr.startswith("error: /nonexistent/c: no such directory")


def test_fast_paths_do_not_import_scipy() -> None:
    """Start-up matters (issue 2: ≤ 0.3 s): scipy is imported only where statistics run.

    One process runs the fast paths in turn and reports what each has imported so far.
    """
    from pathlib import Path

    paths = [["--help"], ["seal", "--help"], ["validate", "--tasks", "tasks"]]
    code = (
        "import sys\nfrom evalrig.cli import app\n"
        f"for args in {paths!r}:\n"
        "    try:\n        app(args)\n    except SystemExit:\n        pass\n"
        "    heavy = sorted(m for m in ('scipy', 'numpy', 'rich.markdown') if m in sys.modules)\n"
        "    print('IMPORTED', args[0], heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=Path(__file__).resolve().parent.parent, env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"})
    report = [line for line in r.stdout.splitlines() if line.startswith("IMPORTED")]
    assert report == ["IMPORTED --help []", "IMPORTED seal []", "IMPORTED validate []"], r.stdout + r.stderr


@pytest.mark.parametrize("name", command_names())
def test_the_help_example_stays_on_one_line_to_paste(name: str) -> None:
    # A narrow terminal must not break the example: pasted as two lines it does not run.
    r = CliRunner().invoke(app, [name, "--help"], env={"NO_COLOR": "1", "COLUMNS": "50"})
    assert r.exit_code == 0, r.output
    example = r.stdout.split("Example:\n\n", 1)[1].split("\n\n", 1)[0]
    assert "\n" not in example.strip("\n"), example
    assert example.strip().startswith(f"evalrig {name} ")


@pytest.fixture
def terminated_command() -> Iterator[str]:
    """A command that receives SIGTERM while it works, as from `kill` or a CI timeout."""
    before = list(app.registered_commands)

    @command("terminated-for-test", "evalrig terminated-for-test")
    def terminated(json_out: JsonOpt = False, debug: DebugOpt = False) -> int:
        """Is sent SIGTERM."""
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(2)  # the signal arrives at once; this only bounds an unhandled one
        return 0

    yield "terminated-for-test"
    app.registered_commands[:] = before


def test_sigterm_ends_any_command_as_interrupted_130(terminated_command: str) -> None:
    # docs/release-flow.md: 130 is "interrupted (Ctrl-C, SIGTERM)" for every command, not just run;
    # the default handler died silently with 143, a code the table does not have.
    def guard(signum: int, frame: object) -> None:
        """Keeps pytest alive should the command not handle the signal itself."""

    previous = signal.signal(signal.SIGTERM, guard)
    try:
        r = CliRunner().invoke(app, [terminated_command, "--json"])
        assert signal.getsignal(signal.SIGTERM) is guard  # restored for whatever runs next
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert r.exit_code == 130, r.output
    assert r.stdout == "" and r.stderr.startswith("interrupted")
    assert "again" in r.stderr


def test_a_reader_that_stops_early_is_not_reported_as_a_bug() -> None:
    # `evalrig schema | head -1`: the reader exits and the next write gets EPIPE. That is
    # not "a bug in evalrig" (exit 6 says where things stand), and no second traceback
    # from the interpreter's final flush follows.
    p = subprocess.Popen([sys.executable, "-m", "evalrig", "schema"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # before the first write: the whole output meets a closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 6
    assert err.startswith("error: stdout was closed"), err
    assert "bug" not in err and "Exception ignored" not in err and "Traceback" not in err


@pytest.mark.parametrize("name", command_names())
def test_repeatable_options_show_what_one_value_is_not_a_python_type(name: str) -> None:
    r = CliRunner().invoke(app, [name, "--help"], env={"NO_COLOR": "1"})
    options = [line for line in r.stdout.splitlines() if line.lstrip().startswith("--")]
    assert not [line for line in options if "list[" in line]


def test_loading_the_commands_imports_no_models() -> None:
    """Every command's start-up loads every command module; each imports the models (and so
    pydantic) only when it runs, so that `champion` or `--version` pays for its own work
    alone (docs/release-engineers.md: a release step is a quick call)."""
    code = "import sys\nimport evalrig.cli\nprint(sorted(m for m in ('pydantic', 'evalrig.models') if m in sys.modules))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_parsing_a_command_imports_no_pydantic(tmp_path: object) -> None:
    """Options are parsed without pydantic (a typer that validates them with it costs every
    command a tenth of a second): `--version` and `champion` on a log that does not exist
    never import it, in the real entry point."""
    from pathlib import Path

    code = ("import sys\nfrom evalrig.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    print('EXIT', e.code, 'pydantic' in sys.modules)\n")
    for args, code_ in ((["--version"], 0), (["champion", "--log", str(Path(str(tmp_path)) / "none.jsonl")], 1)):
        p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)
        assert p.stdout.splitlines()[-1] == f"EXIT {code_} False", (args, p.stdout, p.stderr)


def test_the_command_run_is_the_only_one_built_and_root_options_may_precede_it() -> None:
    from evalrig.cli.app import only_the_command_run

    before = [c.name for c in app.registered_commands]
    one = only_the_command_run(["-q", "--json", "ship", "d.json", "--checkpoint", "c"])
    assert [c.name for c in one.registered_commands] == ["ship"] and one.registered_groups == []
    init = only_the_command_run(["init", "task", "x"])
    assert init.registered_commands == [] and [g.typer_instance.info.name for g in init.registered_groups] == ["init"]
    for whole in ([], ["--help"], ["-h", "ship"], ["--version"], ["chmpion"], ["--install-completion", "ship"]):
        assert only_the_command_run(whole) is app, whole
    assert [c.name for c in app.registered_commands] == before


@pytest.mark.parametrize(("args", "code", "out"), [
    (["-q", "--json", "champion", "--log", "/nonexistent/releases.jsonl"], 1, '"checkpoint_id": null'),
    (["--help"], 0, "check-release"),
    (["chmpion"], 2, "Did you mean 'champion'?"),
    (["init", "--help"], 0, "checkpoint"),
])
def test_the_entry_point_runs_commands_and_groups_and_answers_for_the_rest(args: list[str], code: int,
                                                                            out: str) -> None:
    r = subprocess.run([sys.executable, "-m", "evalrig", *args], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "NO_COLOR": "1"})
    assert r.returncode == code, r.stderr
    assert out in r.stdout + r.stderr
