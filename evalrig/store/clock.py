"""Wall-clock time, for the shell only. The core takes times as parameters."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
