"""Comparison, decision, issued, ledger and sign-off formats (being written)."""

from __future__ import annotations

from pydantic import BaseModel

FORMATS: dict[str, type[BaseModel]] = {}
