#!/usr/bin/env python3
"""Generate a fresh task set for one release train (docs/tasks.md, "Fresh tasks and created_at").

    python3 examples/make_fresh_tasks.py OUT_DIR [--count 30] [--seed N] [--created-at TS] [--replace]

writes OUT_DIR/fresh/<id>/{task.toml, prompt.md, files/, verifier/} and touches nothing
else in OUT_DIR: the set is built in a hidden temporary folder beside it and renamed into
place, so a train directory holds either no fresh set or a whole one. Fresh tasks are made
for one train, after the candidate is sealed, so `created_at` is the time of generation
(UTC, microseconds) unless --created-at pins it (for the bundled development examples).

The problems are new for every seed (the default seed comes from the clock) and belong to
the families the example agents know: reverse-words, sum, word-stats, weekday, date-add,
roman, fix-code. Every prompt uses the same parseable template (`TASK:`, `INPUT:`, ...),
since the example agents are deterministic programs, not models. Standard library only;
TOML is written by hand and read back with tomllib to prove it says what was meant.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import io
import json
import math
import random
import re
import shutil
import sys
import tempfile
import time
import tokenize
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
KIT = HERE / "task_kit"

FAMILIES = ("reverse-words", "sum", "word-stats", "weekday", "date-add", "roman", "fix-code")

WORDS = (
    "amber", "anchor", "basil", "beacon", "cedar", "cobalt", "delta", "ember", "fable", "garnet",
    "harbor", "iris", "jasper", "kestrel", "lantern", "maple", "nectar", "onyx", "pepper",
    "quartz", "raven", "saffron", "tundra", "umber", "velvet", "willow", "yarrow", "zephyr",
    "meadow", "copper", "river", "summit", "thistle", "orchid", "falcon", "glacier",
)  # fmt: skip
SHORT_WORDS = ("a", "the", "sun", "sea", "sky", "and", "of", "wind", "stone", "light", "over", "river")


# -- TOML, written by hand ----------------------------------------------------------------


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and every control character escaped."""
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_string(key)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"TOML value {value!r} is not finite")
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, dt.datetime):
        return format_ts(value)  # an offset date-time literal, not a string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def toml_document(doc: dict[str, object]) -> str:
    """Top-level scalars first, then one [table] per dict value (one level deep)."""
    head = [f"{toml_key(k)} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    tables = []
    for name, table in doc.items():
        if isinstance(table, dict):
            tables.append(f"\n[{toml_key(name)}]")
            tables.extend(f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items())
    return "\n".join(head + tables) + "\n"


def format_ts(ts: dt.datetime) -> str:
    return ts.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(text: str) -> dt.datetime:
    ts = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if ts.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; write it in UTC with a trailing Z")
    return ts.astimezone(dt.UTC)


# -- a task, before it is written ---------------------------------------------------------


@dataclass(frozen=True)
class Draft:
    """One task's content: what the agent reads, what it gets, how it is judged."""

    family: str
    title: str
    prompt: str
    verifier: dict[str, object]
    files: dict[str, str] = field(default_factory=dict)  # path under files/ -> text
    verifier_files: dict[str, str] = field(default_factory=dict)  # name under verifier/ -> text
    evidence: tuple[str, ...] = ()
    timeout_s: float = 30
    tags: tuple[str, ...] = ()
    episode: dict[str, object] | None = None  # [episode] of an episode task (docs/episodes.md)
    driver_files: dict[str, str] = field(default_factory=dict)  # name under driver/ -> text


def prompt_text(title: str, description: str, lines: list[str]) -> str:
    """The fixed template every prompt follows: a title, a sentence, then KEY: value lines."""
    return f"# {title}\n\n{description}\n\n" + "\n".join(lines) + "\n"


def make_reverse_words(words: list[str]) -> Draft:
    sentence = " ".join(words)
    return Draft(
        family="reverse-words",
        title="Reverse the words",
        prompt=prompt_text(
            "Reverse the words",
            "Write the words of the input in reverse order, separated by single spaces.",
            [
                "TASK: reverse-words",
                f"INPUT: {sentence}",
                "ANSWER: out/answer.txt",
            ],
        ),
        verifier={"kind": "exact", "expected": " ".join(reversed(words))},
        tags=("text",),
    )


def grouped_pattern(total: int) -> str:
    """A regex for `total` written with or without thousands separators."""
    digits = str(abs(total))
    head = len(digits) % 3 or 3
    groups = [digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)]
    return ("-" if total < 0 else "") + ",?".join(groups)


def make_sum(numbers: list[int], separators_ok: bool) -> Draft:
    total = sum(numbers)
    note = " Thousands separators (1,234) are accepted." if separators_ok else ""
    verifier: dict[str, object]
    if separators_ok:
        verifier = {"kind": "regex", "pattern": grouped_pattern(total)}
    else:
        verifier = {"kind": "exact", "expected": str(total)}
    return Draft(
        family="sum",
        title="Add the numbers",
        prompt=prompt_text(
            "Add the numbers",
            "Write the sum of the integers of the input as a plain integer." + note,
            [
                "TASK: sum",
                "INPUT: " + " ".join(str(n) for n in numbers),
                "ANSWER: out/answer.txt",
            ],
        ),
        verifier=verifier,
        tags=("arithmetic",),
    )


def word_stats(words: list[str]) -> dict[str, object]:
    longest = max(words, key=len)  # max keeps the first of equals
    return {"words": len(words), "unique": len(set(words)), "longest": longest}


def make_word_stats(words: list[str]) -> Draft:
    return Draft(
        family="word-stats",
        title="Count the words",
        prompt=prompt_text(
            "Count the words",
            'Answer with a JSON object: "words" (how many words), "unique" (how many '
            'distinct words) and "longest" (the first of the longest words).',
            [
                "TASK: word-stats",
                "INPUT: " + " ".join(words),
                "ANSWER: out/answer.json",
            ],
        ),
        verifier={"kind": "json", "expected": word_stats(words)},
        tags=("text", "json"),
    )


WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def make_weekday(day: dt.date) -> Draft:
    name = WEEKDAYS[day.weekday()]
    return Draft(
        family="weekday",
        title="Name the weekday",
        prompt=prompt_text(
            "Name the weekday",
            "Write the English name of the day of the week of the date (any letter case).",
            [
                "TASK: weekday",
                f"INPUT: {day.isoformat()}",
                "ANSWER: out/answer.txt",
            ],
        ),
        verifier={"kind": "regex", "pattern": f"(?i){name}"},
        tags=("dates",),
    )


def make_date_add(start: dt.date, days: int) -> Draft:
    op = "+" if days >= 0 else "-"
    end = start + dt.timedelta(days=days)
    return Draft(
        family="date-add",
        title="Date arithmetic",
        prompt=prompt_text(
            "Date arithmetic",
            "Write the date that is the given number of days after (+) or before (-) the "
            "start date, as YYYY-MM-DD.",
            [
                "TASK: date-add",
                f"INPUT: {start.isoformat()} {op} {abs(days)} days",
                "ANSWER: out/answer.txt",
            ],
        ),
        verifier={"kind": "exact", "expected": end.isoformat()},
        tags=("dates",),
    )


ROMAN = ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
         (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"))  # fmt: skip


def roman(n: int) -> str:
    out = []
    for value, letters in ROMAN:
        count, n = divmod(n, value)
        out.append(letters * count)
    return "".join(out)


def make_roman(n: int) -> Draft:
    return Draft(
        family="roman",
        title="Roman numerals",
        prompt=prompt_text(
            "Roman numerals",
            "Write the number in standard Roman numerals (subtractive notation: 4 is IV).",
            [
                "TASK: roman",
                f"INPUT: {n}",
                "ANSWER: out/answer.txt",
            ],
        ),
        verifier={"kind": "exact", "expected": roman(n)},
        tags=("numbers",),
    )


# -- fix-code: a buggy module, visible examples, hidden cases -------------------------------


@dataclass(frozen=True)
class CodeTemplate:
    """A small correct function, the one-token bugs it can be given, and its test inputs."""

    name: str
    source: str
    bugs: dict[str, tuple[str, str]]  # kind -> (correct snippet, buggy snippet)
    pool: tuple[tuple[object, ...], ...]  # boundary inputs, always among the examples
    draw: Callable[[random.Random], tuple[object, ...]]  # a random input


TEMPLATES = (
    CodeTemplate(
        name="count_multiples",
        source='''def count_multiples(n, k):
    """How many of the numbers 1..n are divisible by k."""
    count = 0
    for i in range(1, n + 1):
        if i % k == 0:
            count += 1
    return count
''',
        bugs={
            "comparison": ("if i % k == 0:", "if i % k != 0:"),
            "arithmetic": ("count += 1", "count -= 1"),
            "off-by-one": ("range(1, n + 1)", "range(0, n + 1)"),
        },
        pool=((10, 3), (6, 1), (3, 5), (12, 4)),
        draw=lambda rng: (rng.randint(1, 60), rng.randint(1, 9)),
    ),
    CodeTemplate(
        name="total_price",
        source='''def total_price(unit, qty, discount):
    """Cost of qty items at unit each, less a flat discount, never below zero."""
    total = unit * qty - discount
    if total < 0:
        return 0
    return total
''',
        bugs={
            "comparison": ("if total < 0:", "if total > 0:"),
            "arithmetic": ("unit * qty - discount", "unit * qty + discount"),
            "off-by-one": ("return 0", "return 1"),
        },
        pool=((3, 4, 2), (5, 1, 10), (2, 5, 0), (1, 1, 1)),
        draw=lambda rng: (rng.randint(1, 50), rng.randint(0, 9), rng.randint(0, 120)),
    ),
    CodeTemplate(
        name="last_index",
        source='''def last_index(items, value):
    """Position of the last occurrence of value in items, or -1 when it is absent."""
    for i in range(len(items) - 1, -1, -1):
        if items[i] == value:
            return i
    return -1
''',
        bugs={
            "comparison": ("if items[i] == value:", "if items[i] != value:"),
            "arithmetic": ("len(items) - 1,", "len(items) + 1,"),
            "off-by-one": ("len(items) - 1,", "len(items) - 2,"),
        },
        pool=(([1, 2, 3, 2], 2), ([5], 5), ([1, 2], 3), ([4, 4, 4], 4), ([7, 8], 8)),
        draw=lambda rng: ([rng.randint(0, 5) for _ in range(rng.randint(0, 7))], rng.randint(0, 5)),
    ),
    CodeTemplate(
        name="fahrenheit",
        source='''def fahrenheit(celsius):
    """The Fahrenheit temperature of a Celsius one."""
    return celsius * 9 / 5 + 32
''',
        bugs={
            "arithmetic": ("/ 5 + 32", "/ 5 - 32"),
            "off-by-one": ("+ 32", "+ 31"),
        },
        pool=((0,), (100,), (-40,), (37,)),
        draw=lambda rng: (rng.randint(-60, 150),),
    ),
    CodeTemplate(
        name="average",
        source='''def average(xs):
    """The arithmetic mean of xs; 0.0 for an empty list."""
    if len(xs) == 0:
        return 0.0
    return sum(xs) / len(xs)
''',
        bugs={
            "comparison": ("if len(xs) == 0:", "if len(xs) != 0:"),
            "arithmetic": ("sum(xs) / len(xs)", "sum(xs) * len(xs)"),
            "off-by-one": ("sum(xs) / len(xs)", "sum(xs) / (len(xs) + 1)"),
        },
        pool=(([2, 4],), ([5],), ([],), ([1, 2, 3, 6],)),
        draw=lambda rng: ([rng.randint(-20, 40) for _ in range(rng.randint(1, 6))],),
    ),
    CodeTemplate(
        name="in_range",
        source='''def in_range(x, lo, hi):
    """Whether x lies in the closed range [lo, hi]."""
    return lo <= x <= hi
''',
        bugs={
            "comparison": ("lo <= x <= hi", "lo < x <= hi"),
        },
        pool=((1, 1, 3), (3, 1, 3), (0, 1, 3), (4, 1, 3), (2, 1, 3)),
        draw=lambda rng: (rng.randint(-5, 15), rng.randint(-5, 5), rng.randint(5, 12)),
    ),
    CodeTemplate(
        name="sum_of_squares",
        source='''def sum_of_squares(n):
    """1*1 + 2*2 + ... + n*n."""
    total = 0
    for i in range(1, n + 1):
        total += i * i
    return total
''',
        bugs={
            "arithmetic": ("total += i * i", "total += i + i"),
            "off-by-one": ("range(1, n + 1)", "range(1, n + 2)"),
        },
        pool=((1,), (3,), (0,), (5,)),
        draw=lambda rng: (rng.randint(0, 40),),
    ),
)
TEMPLATE_BY_NAME = {t.name: t for t in TEMPLATES}
BUG_KINDS = ("comparison", "arithmetic", "off-by-one")

# The mutation catalogue the candidate agent searches; a task is only valid when every
# single-token mutant that satisfies the visible examples also satisfies the hidden cases.
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
ARITH_OPS = ("+", "-", "*", "/", "//", "%")
AUGMENTED_OPS = ("+=", "-=", "*=", "/=")


def mutants(source: str) -> Iterator[str]:
    lines = source.splitlines(keepends=True)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.OP:
            group = next((g for g in (COMPARE_OPS, ARITH_OPS, AUGMENTED_OPS) if tok.string in g), ())
            alternatives = [op for op in group if op != tok.string]
        elif tok.type == tokenize.NUMBER and tok.string.isdigit():
            n = int(tok.string)
            alternatives = [str(m) for m in (n + 1, n - 1) if m >= 0]
        else:
            continue
        (row, start), (_, end) = tok.start, tok.end
        line = lines[row - 1]
        for alt in alternatives:
            changed = line[:start] + alt + line[end:]
            yield "".join(lines[: row - 1] + [changed] + lines[row:])


def same(got: object, expected: object) -> bool:
    """The verifier's notion of equality (task_kit/fix_check.py)."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, float) or isinstance(got, float):
        return isinstance(got, int | float) and math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)  # type: ignore[arg-type]
    return type(got) is type(expected) and got == expected


def satisfies(source: str, name: str, cases: list[dict[str, object]]) -> bool:
    namespace: dict[str, object] = {}
    try:
        exec(compile(source, f"<{name}>", "exec"), namespace)  # our own template, not agent code
        function = namespace[name]
        return all(same(function(*c["args"]), c["expected"]) for c in cases)  # type: ignore[operator]
    except Exception:
        return False


def expected_cases(template: CodeTemplate, inputs: list[tuple[object, ...]]) -> list[dict[str, object]]:
    namespace: dict[str, object] = {}
    exec(compile(template.source, template.name, "exec"), namespace)
    function = namespace[template.name]
    cases, seen = [], set()
    for args in inputs:
        key = json.dumps(args)
        if key not in seen:
            seen.add(key)
            cases.append({"args": json.loads(key), "expected": function(*args)})  # type: ignore[operator]
    return cases


def discriminating_examples(
    buggy: str, name: str, visible: list[dict[str, object]], hidden: list[dict[str, object]]
) -> list[dict[str, object]]:
    """Add hidden cases to the examples until no wrong one-token fix satisfies them."""
    visible = list(visible)
    for _ in range(len(hidden) + 1):
        wrong = next((m for m in mutants(buggy) if satisfies(m, name, visible) and not satisfies(m, name, hidden)), None)
        if wrong is None:
            return visible
        visible.append(next(c for c in hidden if not satisfies(wrong, name, [c])))
    raise AssertionError(f"{name}: could not make the examples discriminate")


def make_fix_code(template: CodeTemplate, bug: str, extra_inputs: list[tuple[object, ...]], style: str) -> Draft:
    correct, buggy_snippet = template.bugs[bug]
    assert template.source.count(correct) >= 1, (template.name, bug)
    buggy = template.source.replace(correct, buggy_snippet, 1)
    pool = list(template.pool)
    visible = expected_cases(template, pool + extra_inputs[:2])
    hidden = expected_cases(template, pool + extra_inputs)
    assert satisfies(template.source, template.name, hidden), template.name
    assert not satisfies(buggy, template.name, visible), (template.name, bug)
    visible = discriminating_examples(buggy, template.name, visible, hidden)
    module = f"src/{template.name}.py"
    examples = [
        f"EXAMPLE: {template.name}({', '.join(repr(a) for a in c['args'])}) == {c['expected']!r}"  # type: ignore[attr-defined]
        for c in visible
    ]
    check = {"module": f"work/{module}", "function": template.name, "style": style, "timeout_s": 10}
    return Draft(
        family="fix-code",
        title="Fix the bug",
        prompt=prompt_text(
            "Fix the bug",
            f"work/{module} has exactly one small bug (one operator or one number is wrong). "
            "Fix it in place so that the examples hold; hidden tests check more cases. "
            "Write one line saying what you changed to out/answer.txt.",
            [
                "TASK: fix-code",
                f"FILE: {module}",
                f"FUNCTION: {template.name}",
                *examples,
                "ANSWER: out/answer.txt",
            ],
        ),
        verifier={"kind": "command", "command": ["python3", "check.py"], "timeout_s": 30, "network": False,
                  "untrusted": True},
        files={module: buggy},
        verifier_files={
            "check.py": (KIT / "fix_check.py").read_text(),
            "check.json": json.dumps(check, indent=2) + "\n",
            "cases.json": json.dumps(hidden, indent=1) + "\n",
        },
        evidence=("work/**/*.py",),
        tags=("code", bug),
    )


# -- drawing a fresh set ------------------------------------------------------------------


def random_date(rng: random.Random, first: dt.date, last: dt.date) -> dt.date:
    return first + dt.timedelta(days=rng.randint(0, (last - first).days))


def draw(family: str, rng: random.Random, index: int) -> Draft:
    """The `index`-th task of `family` in this set, its parameters drawn from `rng`."""
    if family == "reverse-words":
        return make_reverse_words(rng.sample(WORDS, rng.randint(5, 9)))
    if family == "sum":
        numbers = [rng.randint(-999, 3999) for _ in range(rng.randint(4, 8))]
        return make_sum(numbers, separators_ok=rng.random() < 0.5)
    if family == "word-stats":
        vocabulary = rng.sample(WORDS, 4) + list(SHORT_WORDS)
        return make_word_stats([rng.choice(vocabulary) for _ in range(rng.randint(8, 16))])
    if family == "weekday":
        return make_weekday(random_date(rng, dt.date(1950, 1, 1), dt.date(2099, 12, 31)))
    if family == "date-add":
        start = random_date(rng, dt.date(2020, 1, 1), dt.date(2032, 12, 31))
        return make_date_add(start, rng.choice((1, -1)) * rng.randint(20, 600))
    if family == "roman":
        return make_roman(rng.randint(1, 3999))
    if family == "fix-code":
        bug = BUG_KINDS[index % len(BUG_KINDS)]  # the kinds in turn, from a seeded start
        template = rng.choice([t for t in TEMPLATES if bug in t.bugs])
        extra = [template.draw(rng) for _ in range(10)]
        return make_fix_code(template, bug, extra, style=rng.choice(("reward", "exit")))
    raise ValueError(f"unknown family {family!r}")


def plan_families(count: int, rng: random.Random) -> list[str]:
    """As even a spread over the families as the count allows, in a seeded order."""
    families = [FAMILIES[i % len(FAMILIES)] for i in range(count)]
    rng.shuffle(families)
    return families


def fresh_set(count: int, seed: int) -> list[tuple[str, Draft]]:
    rng = random.Random(seed)
    drafts = []
    seen = {family: rng.randrange(len(BUG_KINDS)) for family in FAMILIES}
    for index, family in enumerate(plan_families(count, rng)):
        draft = draw(family, rng, seen[family])
        seen[family] += 1
        tag = hashlib.sha256(f"{seed}:{index}:{draft.prompt}".encode()).hexdigest()[:6]
        drafts.append((f"{family}-{tag}", draft))
    return drafts


# -- writing ------------------------------------------------------------------------------


def task_document(draft: Draft, *, task_id: str | None, suite: str | None, created_at: dt.datetime | None,
                  limits: dict[str, object] | None = None) -> dict[str, object]:  # fmt: skip
    """task.toml as a dict, in the order docs/tasks.md lists the keys."""
    doc: dict[str, object] = {}
    if task_id is not None:
        doc["id"] = task_id
    if suite is not None:
        doc["suite"] = suite
    if created_at is not None:
        doc["created_at"] = created_at
    doc["tags"] = [draft.family, *draft.tags]
    doc["timeout_s"] = draft.timeout_s
    doc.update(limits or {})
    doc["network"] = False
    if draft.evidence:
        doc["evidence"] = list(draft.evidence)
    doc["resources"] = {"cpus": 1}
    doc["verifier"] = {**draft.verifier, "version": "1"}
    if draft.episode is not None:
        doc["episode"] = draft.episode
    return doc


def write_task(task_dir: Path, draft: Draft, doc: dict[str, object]) -> None:
    text = toml_document(doc)
    if tomllib.loads(text) != doc:  # the hand-written TOML must say exactly what was meant
        raise AssertionError(f"{task_dir}: task.toml does not round-trip")
    task_dir.mkdir(parents=True)
    (task_dir / "task.toml").write_text(text)
    (task_dir / "prompt.md").write_text(draft.prompt)
    for rel, content in draft.files.items():
        path = task_dir / "files" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    for sub, files in (("verifier", draft.verifier_files), ("driver", draft.driver_files)):
        for rel, content in files.items():
            path = task_dir / sub / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)


def write_fresh_set(out_dir: Path, count: int, seed: int, created_at: dt.datetime, replace: bool) -> Path:
    """Build OUT_DIR/fresh whole in a temporary folder, then rename it into place."""
    target = out_dir / "fresh"
    if target.exists() and any(target.iterdir()) and not replace:
        raise FileExistsError(f"{target} already holds tasks; pass --replace to replace them or choose another OUT_DIR")
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".fresh-", dir=out_dir))
    try:
        for task_id, draft in fresh_set(count, seed):
            write_task(staging / task_id, draft, task_document(draft, task_id=None, suite=None, created_at=created_at))
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=".fresh-old-", dir=out_dir))
            target.rename(old / "fresh")
            shutil.rmtree(old)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a fresh task set into OUT_DIR/fresh/.")
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    parser.add_argument("--count", type=int, default=30, help="number of tasks (default 30)")
    parser.add_argument("--seed", type=int, default=None, help="problem seed (default: from the clock)")
    parser.add_argument("--created-at", default=None, help="pin created_at (UTC, e.g. 2026-12-01T10:00:00.000000Z)")
    parser.add_argument("--replace", action="store_true", help="replace an existing OUT_DIR/fresh")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    try:
        created_at = parse_ts(args.created_at) if args.created_at else dt.datetime.now(dt.UTC)
    except ValueError as exc:
        parser.error(f"--created-at: {exc}")
    seed = args.seed if args.seed is not None else time.time_ns() % 2**63
    try:
        target = write_fresh_set(args.out_dir, args.count, seed, created_at, args.replace)
    except (FileExistsError, OSError) as exc:
        print(f"make_fresh_tasks: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, FileExistsError) else 6
    print(f"wrote {args.count} fresh tasks into {target} (seed {seed}, created_at {format_ts(created_at)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
