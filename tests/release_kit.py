"""Builders for the release-log tests: gated trains of built bundles (gate_bundles), real
sealed checkpoints (tests/agents/run_agent.py), the CLI in-process, the chain recomputed."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agents.run_kit import make_checkpoint as make_agent
from gate_bundles import Side, counts_tasks, write_run
from typer.testing import CliRunner

from evalrig.cli import app
from evalrig.core.digest import sha256_bytes
from evalrig.store.checkpoint import checkpoint_id, seal
from evalrig.store.compare import compare_bundles
from evalrig.store.decisions import gate_comparison

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
CHAMP = [5, 4, 5, 3, 2, 5, 0, 1, 4, 5, 3, 2, 5, 4, 1, 0, 5, 3, 4, 2, 3, 3, 4, 1, 2, 5, 0, 4, 3, 2]
BETTER = [min(5, c + 2) if i % 3 else c for i, c in enumerate(CHAMP)]


def cli(*args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args], env={"NO_COLOR": "1"})


def train(root: Path, home: Path, name: str, champion: str, candidate: Path, counts: list[int],
          exception: str | None = None, policy: str = "default.toml") -> Path:
    """Gate a train of `candidate` (a sealed directory) against `champion` (a checkpoint id)
    under `policy` of policies/ (the default, v2); returns the decision file."""
    d = root / name
    d.mkdir()
    pol = d / "policy.toml"
    pol.write_bytes((ROOT / "policies" / policy).read_bytes())
    digest = sha256_bytes(pol.read_bytes())

    def tasks(counts: list[int]) -> dict:
        # each train's fresh tasks are its own (a task seen by another candidate is not fresh)
        return {k: replace(t, content=sha256_bytes(f"{name}:{k}".encode())) if t.suite == "fresh" else t
                for k, t in counts_tasks(counts).items()}

    a = write_run(d / "a", Side(f"champ-{name}", tasks(CHAMP), policy_digest=digest, ckpt=champion), home)
    b = write_run(d / "b", Side(name, tasks(counts), policy_digest=digest, ckpt=checkpoint_id(candidate).digest,
                                sealed=False, sealed_at=NOW - timedelta(days=1),
                                fresh_created_at=NOW - timedelta(hours=12)), home)
    compare_bundles(a, b, d / "cmp", home)
    return gate_comparison(d / "cmp", pol, exception, False, home, NOW).decision_file


def agent(root: Path, home: Path, name: str, answer: str | None = None) -> Path:
    """A real checkpoint (tests/agents/run_agent.py); `answer` makes it answer that always."""
    d = make_agent(root, home, name=name, do_seal=False)
    if answer is not None:
        text = (d / "agent.py").read_text()
        (d / "agent.py").write_text(text.replace('answer = lines.get("answer", "")', f'answer = "{answer}"'))
    seal(d, home, NOW - timedelta(days=1))
    return d


def recompute_chain(log: Path) -> list[dict]:
    lines = log.read_bytes().split(b"\n")
    assert lines.pop() == b""
    prev, out = None, []
    for i, raw in enumerate(lines):
        obj = json.loads(raw)
        assert (obj["seq"], obj["prev"]) == (i, prev)
        prev = hashlib.sha256(raw).hexdigest()
        out.append(obj)
    return out


def ok(r: object, code: int = 0) -> object:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)  # type: ignore[attr-defined]
    assert "Traceback" not in r.output  # type: ignore[attr-defined]
    return r
