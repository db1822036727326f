"""Defaults for `run` from a file in the working directory (docs/release-flow.md, "Defaults
from a file"): `evalrig.toml`, or else the `[tool.evalrig]` table of `pyproject.toml`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalrig.core.errors import Problem
from evalrig.core.tomlerr import parse_toml, raise_problems, validate_doc
from evalrig.models.inputs import RunDefaultsFile

CONFIG_FILE = "evalrig.toml"
PYPROJECT = "pyproject.toml"
HINT = ("the keys are tasks, policy, repeat, jobs and sandbox (docs/release-flow.md, "
        "\"Defaults from a file\"); fix the file, or move it aside")


@dataclass(frozen=True)
class RunDefaults:
    file: Path
    values: RunDefaultsFile

    def path(self, value: str) -> Path:
        """A path the file names, relative to the file's folder."""
        return (self.file.parent / value).resolve()


def find_run_defaults(cwd: Path) -> RunDefaults | None:
    """The defaults file of `cwd`, parsed; None when there is none. A file that is there
    but malformed is an error (exit 4 naming the file and the key), never ignored."""
    own = cwd / CONFIG_FILE
    if own.is_file():
        return _load(own, None)
    pyproject = cwd / PYPROJECT
    if pyproject.is_file():
        return _load(pyproject, ("tool", "evalrig"))
    return None


def _load(path: Path, table: tuple[str, ...] | None) -> RunDefaults | None:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise_problems([Problem(str(path), f"cannot be read ({e.strerror})")], HINT)
    doc = parse_toml(str(path), raw)
    if isinstance(doc, Problem):
        raise_problems([doc], HINT)
    data = doc.data
    for key in table or ():
        inner = data.get(key)
        if inner is None:
            return None
        if not isinstance(inner, dict):
            raise_problems([Problem(str(path), "is not a table", ".".join(table or ()))], HINT)
        data = inner
    got = validate_doc(doc, RunDefaultsFile, data)
    if isinstance(got, list):
        if table:  # name the key as it is written in pyproject.toml
            got = [Problem(p.file, p.message, f"{'.'.join(table)}.{p.field}" if p.field else ".".join(table),
                           p.line) for p in got]
        raise_problems(got, HINT)
    return RunDefaults(path.resolve(), got)
