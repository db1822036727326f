#!/usr/bin/env python3
"""Fresh tasks for the LLM release train, and what the stand-in provider answers to them.

    python3 examples/llm-agent/make_tasks.py TASKS_DIR ANSWERS_JSON [--count 20] [--seed N]

writes TASKS_DIR/fresh/<family>-<hex>/{task.toml, prompt.md} (exact verifiers: the answer in
out/answer.txt) and ANSWERS_JSON, the stand-in's `--answers` file (examples/model-standin):
each prompt's text mapped to its right answer. The stand-in is not a model; it plays one
that knows these answers, the same for every model name, so the champion (an expensive
model) and the candidate (a cheap one) answer alike and only their metered cost differs.

Fresh tasks are made after the builds are sealed: `created_at` is now (UTC, microseconds).
The set is built in a hidden folder and renamed into place, as examples/make_fresh_tasks.py
does; an existing TASKS_DIR/fresh is refused (exit 2). Standard library only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import random
import shutil
import sys
import tempfile
import time
import tomllib
from pathlib import Path

WORDS = ("amber", "anchor", "basil", "beacon", "cedar", "cobalt", "delta", "ember", "fable",
         "garnet", "harbor", "iris", "jasper", "kestrel", "lantern", "maple", "nectar", "onyx",
         "pepper", "quartz", "raven", "saffron", "tundra", "umber", "velvet", "willow")


def reverse_words(rng: random.Random) -> tuple[str, str, str]:
    words = rng.sample(WORDS, rng.randint(3, 7))
    return ("reverse-words", "Reverse the order of the words. Keep each word as it is.\n\n"
            f"INPUT: {' '.join(words)}\n", " ".join(reversed(words)))


def add(rng: random.Random) -> tuple[str, str, str]:
    nums = [rng.randint(10, 999) for _ in range(rng.randint(2, 5))]
    return ("sum", "Add the numbers. Write the total in plain digits.\n\n"
            f"INPUT: {' + '.join(map(str, nums))}\n", str(sum(nums)))


def capitals(rng: random.Random) -> tuple[str, str, str]:
    words = rng.sample(WORDS, rng.randint(2, 5))
    return ("shout", "Write the words in capital letters, separated by single spaces.\n\n"
            f"INPUT: {' '.join(words)}\n", " ".join(w.upper() for w in words))


FAMILIES = (reverse_words, add, capitals)


def task_toml(created_at: str, family: str, expected: str) -> str:
    # json.dumps of ASCII text is a valid TOML basic string
    return (f"created_at = {created_at}\n"
            f"tags = [\"llm\", {json.dumps(family)}]\n"
            "timeout_s = 60\n"
            "network = false\n\n"
            "[verifier]\n"
            "kind = \"exact\"\n"
            f"expected = {json.dumps(expected)}\n"
            "version = \"1\"\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tasks_dir", type=Path)
    p.add_argument("answers", type=Path, help="the stand-in's --answers file to write")
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--seed", type=int, default=None, help="problem seed (default: from the clock)")
    a = p.parse_args(argv)
    target = a.tasks_dir / "fresh"
    if target.exists() and any(target.iterdir()):
        print(f"make_tasks: {target} exists and is not empty; choose another directory", file=sys.stderr)
        return 2
    seed = a.seed if a.seed is not None else time.time_ns() % 2**32
    rng = random.Random(seed)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    a.tasks_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".fresh-", dir=a.tasks_dir))
    answers: dict[str, str] = {}
    try:
        for i in range(a.count):
            family, prompt, expected = FAMILIES[i % len(FAMILIES)](rng)
            prompt = f"# {family}\n\n{prompt}\nANSWER: out/answer.txt\n"
            tag = hashlib.sha256(f"{seed}:{i}:{prompt}".encode()).hexdigest()[:6]
            d = tmp / f"{family}-{tag}"
            d.mkdir()
            text = task_toml(now, family, expected)
            assert tomllib.loads(text)["verifier"]["expected"] == expected
            (d / "task.toml").write_text(text)
            (d / "prompt.md").write_text(prompt)
            answers[prompt] = expected  # the agent sends the prompt's text as the user message
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    a.answers.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    print(f"make_tasks: {a.count} fresh tasks in {target} (seed {seed}); the stand-in's answers in {a.answers}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
