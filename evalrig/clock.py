"""Wall-clock time, for the shell only. The core takes times as parameters."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_ts(ts: datetime) -> str:
    """`2026-12-02T10:15:03.123456Z`: UTC, always with microseconds (docs/statistics.md)."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
