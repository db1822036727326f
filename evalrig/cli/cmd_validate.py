"""`validate` and `schema`: checking files without running anything."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, command, emit_json, err, say
from evalrig.core.errors import UsageError
from evalrig.core.words import count
from evalrig.store.invocation import command_name


@command("validate", "evalrig validate --tasks tasks --policies policies")
def validate_cmd(
    bundles: Annotated[
        list[Path] | None,
        typer.Argument(help="Run or comparison bundles to check (formats and digests)."),
    ] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="A task set directory.")] = None,
    policies: Annotated[
        Path | None,
        typer.Option("--policies", help="A directory of policy *.toml files, or one policy file."),
    ] = None,
    checkpoint: Annotated[
        list[Path] | None,
        typer.Option("--checkpoint", metavar="<path>", help="A checkpoint directory (repeatable)."),
    ] = None,
    champion: Annotated[
        Path | None,
        typer.Option("--champion", metavar="<path>", help="The champion's checkpoint directory: warns "
                     "when it declares a [history] log a --checkpoint lacks (the gate would block)."),
    ] = None,
    interpreter_prefix: Annotated[
        list[Path] | None,
        typer.Option("--interpreter-prefix", metavar="<dir>", help="As for run: an interpreter "
                     "installation a checkpoint's command may resolve under (repeatable)."),
    ] = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Check task folders, policies, checkpoints and bundles without running anything.

    Lists every problem at once as `file:line: field.path: message` (the line where the
    parser gives one) and exits 4 if there is any, 0 otherwise. With no arguments it
    checks ./tasks and ./policies. A task's suite is its parent folder (a `suite` key must
    agree); its id is the folder name unless task.toml gives one, and ids are unique. Fixed
    tasks not yet in fixed.lock are a warning; a locked one removed or edited is a problem.
    A checkpoint's command (and estimate) must resolve where run would let it run: inside
    the checkpoint, under /usr, /bin, /sbin, /lib*, or an --interpreter-prefix. An unsealed
    checkpoint is a warning; one changed since it was sealed is a problem. Warnings also come
    before a gate that would block: with --tasks and --checkpoint, fresh tasks created before
    the checkpoint's seal (fresh-after-seal); with --champion, a [history] log the champion
    declares and a --checkpoint lacks (history-preserved). A run bundle's JSONL lines are checked against their
    formats (a torn last line is a problem) and, once complete, every file digest of its
    manifest.
    """
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.validate import default_targets, validate

    checkpoints = list(checkpoint or [])
    bundle_dirs = list(bundles or [])
    if champion is not None and not checkpoints:
        raise UsageError("--champion: give the candidate too (--checkpoint DIR)")
    if tasks is None and policies is None and not checkpoints and not bundle_dirs:
        tasks, policies = default_targets()
        if tasks is None and policies is None:
            raise UsageError("nothing to validate: no ./tasks or ./policies here",
                             hint="give --tasks DIR, --policies DIR, --checkpoint DIR or a bundle")
    report = validate(tasks, policies, checkpoints, bundle_dirs, evalrig_home(), interpreter_prefix or [],
                      champion)
    for p in report.problems:
        err(p.render())
    for w in report.warnings:
        err("warning: " + w.render())
    if json_out:
        emit_json(report.as_dict())
    checked = ", ".join(f"{what}: {n}" for what, n in sorted(report.checked.items()))
    if report.ok:
        if not json_out:
            say(f"ok: {checked}" if checked else "ok, but nothing was checked: the paths given hold no "
                "task, policy, checkpoint or bundle (see the warnings above)")
        return 0
    n = len(report.problems)
    what = f"checked: {checked}" if checked else "nothing could be checked past these problems"
    err(f"{count(n, 'problem')} found ({what})\n"
        f"  -> fix each problem above, then run `{command_name()} validate` again")
    return 4


@command("schema", "evalrig schema task")
def schema_cmd(
    name: Annotated[str | None, typer.Argument(help="A format name; all of them when left out.")] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write DIR/<name>.schema.json instead of printing."),
    ] = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Print the JSON Schema of one file format, or of all of them.

    The schemas are generated from the rig's models; schemas/ in the repository holds the
    committed copy (regenerate it with `evalrig schema --out schemas`). Without NAME,
    prints one object {name: schema} of every format, or with --out writes one file per
    format.
    """
    from evalrig.store.schema import all_schemas, schema_of, write_schemas

    if name is not None:
        schema_of(name)  # an unknown name is a usage error, before anything is written
    if out is not None:
        written = write_schemas(out, [name] if name else None)
        if json_out:
            emit_json({"written": [str(p) for p in written]})
        else:
            say([f"wrote {p}" for p in written])
        return 0
    emit_json(schema_of(name) if name else all_schemas())
    return 0
