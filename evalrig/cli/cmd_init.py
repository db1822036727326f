"""`init task` and `init checkpoint`: files to start from, each field explained in a comment."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, app, command, emit_json, help_markup, say

init_app = typer.Typer(
    name="init",
    help="Write a new task or checkpoint that validates as written.\n\n"
         "Example:  evalrig init task parse-dates --suite fresh",
    no_args_is_help=True,
    rich_markup_mode=help_markup(),
)
app.add_typer(init_app)


class SuiteChoice(StrEnum):
    fixed = "fixed"
    fresh = "fresh"
    invariant = "invariant"
    public = "public"


class KindChoice(StrEnum):
    exact = "exact"
    code = "code"


@command("task", "evalrig init task parse-dates --tasks tasks --suite fresh", on=init_app)
def init_task(
    name: Annotated[str, typer.Argument(help="The task's id and folder name ([A-Za-z0-9._-]+).")],
    tasks: Annotated[Path, typer.Option("--tasks", help="The task set directory (made if missing).")] = Path("tasks"),
    suite: Annotated[SuiteChoice, typer.Option("--suite", help="The suite the task joins.")] = SuiteChoice.fixed,
    kind: Annotated[KindChoice, typer.Option("--kind", help="exact: an answer to compare; code: the agent "
                                             "writes a function, run only through the untrusted-run service.")
                    ] = KindChoice.exact,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Write TASKS/SUITE/NAME/task.toml and prompt.md, a task that passes `evalrig validate`.

    task.toml spells out every field with its default and a comment saying what it does;
    the verifier is `exact` with a placeholder answer to replace. With `--kind code`, also
    files/src/solution.py (the starting module) and a command verifier (verifier/check.py,
    cases.json) that runs the agent's function only through `$EVALRIG_RUN_UNTRUSTED` and
    compares the values itself (docs/tasks.md). A fresh task gets `created_at` set to now.
    Refuses (exit 4, naming the path) when a task of that name exists in any suite: nothing
    is ever overwritten.
    """
    from evalrig.store.clock import utcnow
    from evalrig.store.scaffold import scaffold_task

    written = scaffold_task(tasks, name, suite.value, utcnow(), kind.value)
    return _report_written(written, json_out, f"wrote task {name} in {written[0].parent}",
                           f"next: write the prompt and the verifier's answer, then `evalrig validate --tasks {tasks}`")


@command("checkpoint", "evalrig init checkpoint my-agent --name my-agent", on=init_app)
def init_checkpoint(
    dir: Annotated[Path, typer.Argument(help="The checkpoint directory (made if missing).")],
    name: Annotated[str | None, typer.Option("--name", help="The agent's name (default: the directory's name).")] = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Write DIR/checkpoint.toml and a minimal DIR/agent.py, a checkpoint that passes `evalrig validate`.

    checkpoint.toml explains each field in a comment; agent.py reads the prompt and writes
    an answer, to be replaced by your agent. Refuses (exit 4, naming the path) when either
    file exists: nothing is ever overwritten. Seal the directory before a run.
    """
    from evalrig.store.scaffold import scaffold_checkpoint

    written = scaffold_checkpoint(dir, name)
    return _report_written(written, json_out, f"wrote checkpoint {dir}",
                           f"next: write your agent, then `evalrig validate --checkpoint {dir}` and `evalrig seal {dir}`")


def _report_written(written: list[Path], json_out: bool, headline: str, next_step: str) -> int:
    """The files a scaffold wrote: a JSON list, or a headline, one line each and what to do next."""
    if json_out:
        emit_json({"written": [str(p) for p in written]})
    else:
        say([headline, *(f"  {p}" for p in written), next_step])
    return 0
