"""The home's record of exports (`exports.jsonl`, hash-chained like the home's other files):
what left the rig as training data, so that no gate takes those tasks as fresh again
(docs/reading.md, docs/gate.md)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from evalrig.models.base import format_ts
from evalrig.models.reading import ExportEntry
from evalrig.store.jsonl import chained_append, read_chained
from evalrig.store.layout import EXPORTS
from evalrig.store.ledger import ensure_dir


def exports_path(home: Path) -> Path:
    return Path(home) / EXPORTS


def record_export(home: Path, entry: ExportEntry) -> None:
    path = exports_path(home)
    ensure_dir(path.parent)
    with chained_append(path, ExportEntry, home=home) as chain:
        chain.append(entry)


def exported_content(home: Path, until: datetime | None = None) -> dict[str, str]:
    """content digest -> "export of RUN_ID… at TIME", for every task of every recorded export
    (the earliest where several hold one), only those recorded no later than `until` when it
    is given; exit 4 when the file's chain is broken."""
    out: dict[str, str] = {}
    for e in read_chained(exports_path(home), ExportEntry, home=home).records:
        if until is not None and e.at > until:
            continue
        label = f"export of {', '.join(b.run_id for b in e.bundles)} at {format_ts(e.at)}"
        for d in e.content:
            out.setdefault(d, label)
    return out
