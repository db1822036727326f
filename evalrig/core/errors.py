"""Errors the rig raises on purpose, each carrying the exit code it maps to (the README's exit codes).

Library code raises these; only the CLI turns them into messages and exit codes.
A message always names the file, the field path where there is one, and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    KEEP = 1  # gate: keep the champion; check-release: not approved
    USAGE = 2
    BLOCK = 3  # gate: block
    INVALID = 4
    INCOMPLETE = 5
    INTERNAL = 6
    INTERRUPTED = 130


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one input: `file:line: field.path: message`."""

    file: str | None
    message: str
    field: str | None = None
    line: int | None = None

    def render(self) -> str:
        head = ""
        if self.file:
            head = self.file + (f":{self.line}" if self.line is not None else "") + ": "
        if self.field:
            head += f"{self.field}: "
        return head + self.message

    def as_dict(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "field": self.field, "message": self.message}


@dataclass
class EvalrigError(Exception):
    """A failure the user can act on. `hint` says what to do next."""

    message: str
    code: ExitCode = ExitCode.INVALID
    file: str | None = None
    field: str | None = None
    line: int | None = None
    hint: str | None = None
    problems: list[Problem] = dc_field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def render(self) -> str:
        lines = [Problem(self.file, self.message, self.field, self.line).render()]
        lines += ["  " + p.render() for p in self.problems]
        if self.hint:
            lines.append(f"  -> {self.hint}")
        return "\n".join(lines)


class InvalidInput(EvalrigError):
    """A file fails its schema, a digest does not verify, inputs do not match (exit 4)."""


class UsageError(EvalrigError):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, ExitCode.USAGE, hint=hint)


class Incomplete(EvalrigError):
    def __init__(self, message: str, file: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, ExitCode.INCOMPLETE, file=file, hint=hint)


class DiskFull(EvalrigError):
    """No space (ENOSPC) or quota (EDQUOT) left while a run wrote: the run stops, its bundle
    stays resumable, and the message names the path and the bytes it needed (exit 5)."""

    def __init__(self, message: str, file: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, ExitCode.INCOMPLETE, file=file, hint=hint)


class Interrupted(EvalrigError):
    def __init__(self, message: str, file: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, ExitCode.INTERRUPTED, file=file, hint=hint)


def invalid(
    message: str,
    file: object | None = None,
    field: str | None = None,
    line: int | None = None,
    hint: str | None = None,
    problems: list[Problem] | None = None,
) -> EvalrigError:
    """Shorthand for an exit-4 error about one file."""
    return EvalrigError(
        message,
        ExitCode.INVALID,
        file=str(file) if file is not None else None,
        field=field,
        line=line,
        hint=hint,
        problems=problems or [],
    )
