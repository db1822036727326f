"""evalrig example agent, build "champion" (2026-10): a deterministic offline program.

It reads the task from $EVALRIG_PROMPT (the `TASK:` / `INPUT:` template of the bundled
tasks), works in $EVALRIG_WORK, answers in $EVALRIG_OUT and reports made-up usage that is
a deterministic function of the prompt. Where it "slips" (a stand-in for a model's
sampling noise) it draws from $EVALRIG_SEED, so a trial replays exactly and the champion
and the candidate see the same draw on the same trial. Standard library only.

The build in service. Its known weaknesses, which the candidate addresses
(examples/README.md has the whole table):
- weekday: no such skill;
- sum: writes totals of 10,000 and more with thousands separators (12,345), which only
  tasks that accept separators take;
- date-add: when the span crosses a month boundary it slips, on half of its trials, to
  counting every month as 30 days;
- roman: writes numerals additively (4 is IIII), so any 4 or 9 digit is wrong;
- fix-code: searches comparison mutations only, never arithmetic or numbers.
"""

import datetime as dt
import json
import math
import os
import random
import sys

BUILD = "champion"
PRICE_PER_TOKEN = {"input": 2.0e-6, "output": 8.0e-6}
# Self-assessed chance of success per family, for --estimate (the reward channel).
# This build is overconfident: its Brier score is worse than the candidate's.
CONFIDENCE = {
    "reverse-words": 0.99, "sum": 0.99, "word-stats": 0.98,
    "date-add": 0.95, "roman": 0.95, "fix-code": 0.9,
}  # fmt: skip
MONTH_SLIP = 0.5


class Task:
    """The prompt's `KEY: value` lines; EXAMPLE lines are kept in order."""

    def __init__(self, text):
        self.text = text
        self.fields = {}
        self.examples = []
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if not sep or not key.isupper():
                continue
            if key == "EXAMPLE":
                self.examples.append(value.strip())
            else:
                self.fields.setdefault(key, value.strip())

    @property
    def family(self):
        return self.fields.get("TASK", "")


class Answer:
    def __init__(self, text=None, data=None, work_tokens=0):
        self.text = text
        self.data = data
        self.work_tokens = work_tokens  # "thinking" tokens beyond the answer itself


def draw(seed):
    """The trial's one uniform draw: the same for both builds on the same trial."""
    return random.Random(seed).random()


# -- skills ---------------------------------------------------------------------------------


def reverse_words(task, work, u):
    return Answer(text=" ".join(reversed(task.fields["INPUT"].split())))


def add_numbers(task, work, u):
    total = sum(int(n) for n in task.fields["INPUT"].split())
    return Answer(text=f"{total:,}" if abs(total) >= 10000 else str(total))


def word_stats(task, work, u):
    words = task.fields["INPUT"].split()
    longest = max(words, key=len)
    return Answer(data={"words": len(words), "unique": len(set(words)), "longest": longest})


def thirty_day_months(start, days):
    """The slip: date arithmetic as if every month had 30 days."""
    months, day = divmod(start.day - 1 + days, 30)
    year, month = divmod(start.month - 1 + months, 12)
    return dt.date(start.year + year, month + 1, min(day + 1, 28))


def date_add(task, work, u):
    start_text, op, count, _unit = task.fields["INPUT"].split()
    start = dt.date.fromisoformat(start_text)
    days = int(count) if op == "+" else -int(count)
    end = start + dt.timedelta(days=days)
    if (end.year, end.month) != (start.year, start.month) and u < MONTH_SLIP:
        end = thirty_day_months(start, days)
    return Answer(text=end.isoformat())


ROMAN = ((1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I"))  # additive only


def to_roman(task, work, u):
    n = int(task.fields["INPUT"])
    out = []
    for value, letters in ROMAN:
        count, n = divmod(n, value)
        out.append(letters * count)
    return Answer(text="".join(out))


# -- fix-code: search one-token mutations until the examples hold ---------------------------

MUTATION_GROUPS = (
    ("comparison", ("<", "<=", ">", ">=", "==", "!=")),
    ("arithmetic", ("+", "-", "*", "/", "//", "%")),
    ("arithmetic", ("+=", "-=", "*=", "/=")),
)


def mutations(source, kinds):
    """(description, mutated source) for every one-token change of the given kinds."""
    import io
    import tokenize  # here, not at the top: start-up time counts on every other task
    lines = source.splitlines(keepends=True)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for kind in ("comparison", "arithmetic", "number"):
        if kind not in kinds:
            continue
        for tok in tokens:
            alternatives = []
            if kind != "number" and tok.type == tokenize.OP:
                for group_kind, group in MUTATION_GROUPS:
                    if group_kind == kind and tok.string in group:
                        alternatives = [op for op in group if op != tok.string]
            elif kind == "number" and tok.type == tokenize.NUMBER and tok.string.isdigit():
                alternatives = [str(m) for m in (int(tok.string) + 1, int(tok.string) - 1) if m >= 0]
            (row, start), (_, end) = tok.start, tok.end
            for alt in alternatives:
                line = lines[row - 1]
                changed = "".join(lines[: row - 1] + [line[:start] + alt + line[end:]] + lines[row:])
                yield f"line {row}: {tok.string!r} -> {alt!r}", changed


def parse_example(text):
    """`f(1, [2]) == 3` -> (args, expected), literals only."""
    import ast
    call_text, _, expected_text = text.rpartition(" == ")
    call = ast.parse(call_text, mode="eval").body
    return [ast.literal_eval(a) for a in call.args], ast.literal_eval(expected_text)


def same(got, expected):
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
    return type(got) is type(expected) and got == expected


def satisfies(source, name, examples):
    namespace = {}
    try:
        exec(compile(source, name, "exec"), namespace)
        function = namespace[name]
        return all(same(function(*args), expected) for args, expected in examples)
    except Exception:
        return False


def fix_code(task, work, u):
    path = os.path.join(work, task.fields["FILE"])
    name = task.fields["FUNCTION"]
    examples = [parse_example(e) for e in task.examples]
    with open(path, encoding="utf-8") as f:
        source = f.read()
    kinds = {"comparison"}
    tried = 0
    for description, mutant in mutations(source, kinds):
        tried += 1
        if satisfies(mutant, name, examples):
            with open(path, "w", encoding="utf-8") as f:
                f.write(mutant)
            return Answer(text=f"fixed {task.fields['FILE']} {description}", work_tokens=40 * tried)
    return Answer(text=f"no one-token fix found in {task.fields['FILE']}", work_tokens=40 * tried)


def output_format(task, work, u):
    with open(os.path.join(work, task.fields["FILE"]), encoding="utf-8") as f:
        lines = f.read().splitlines()
    return Answer(data={"task": os.environ.get("EVALRIG_TASK_ID", ""), "format": "evalrig-answer/1",
                        "lines": len(lines)})  # fmt: skip


def shout(task, work, u):
    with open(os.path.join(work, task.fields["FILE"]), encoding="utf-8") as f:
        return Answer(text=f.read().strip().upper())


SOLVERS = {
    "reverse-words": reverse_words,
    "sum": add_numbers,
    "word-stats": word_stats,
    "date-add": date_add,
    "roman": to_roman,
    "fix-code": fix_code,
    "output-format": output_format,
    "shout": shout,
}


# -- the contract with the rig --------------------------------------------------------------


def usage(task, answer):
    """Made-up but plausible spend: tokens grow with the prompt and the work done."""
    body = answer.text if answer.text is not None else json.dumps(answer.data)
    input_tokens = 180 + len(task.text) // 4
    output_tokens = 24 + len(body) // 4 + answer.work_tokens
    cost = input_tokens * PRICE_PER_TOKEN["input"] + output_tokens * PRICE_PER_TOKEN["output"]
    return {"cost_usd": round(cost, 6), "input_tokens": input_tokens, "output_tokens": output_tokens}


def estimate(task):
    p = CONFIDENCE.get(task.family, 0.95 if task.family in SOLVERS else 0.05)
    typical = usage(task, Answer(text="x" * 24, work_tokens=200 if task.family == "fix-code" else 0))
    cost = typical["cost_usd"]
    return {"p_success": p, "time_s": [0.02, 0.3], "cost_usd": [round(cost * 0.5, 6), round(cost * 1.6, 6)],
            "level": 0.8}  # fmt: skip


# -- episodes: a conversation through the rig (docs/episodes.md) -----------------------------

EPISODE_COST = 0.02  # made-up spend of one turn, reported with each message


def say(message):
    frame = {"type": "message", "message": message,
             "usage": {"cost_usd": EPISODE_COST, "input_tokens": 120, "output_tokens": 20}}
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def tool_call(n, name, **args):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call-{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def episode(task, out):
    """The shop: place the customer's order, say so, then answer politely until the end.
    Looks the price up before every order (one turn more than the candidate)."""
    import re

    item, qty, tries, calls, summary = None, 1, 0, 0, "nothing ordered"
    for line in sys.stdin:
        frame = json.loads(line)
        if frame["type"] == "end":
            break
        messages = frame.get("messages", [])
        user = [m for m in messages if m["role"] == "user"]
        tools = [m for m in messages if m["role"] == "tool"]
        if frame["type"] == "session":
            found = re.search(r"order (\d+) ([a-z]+)", user[0]["content"]) if user else None
            if found is None:
                say({"role": "assistant", "content": f"{BUILD} cannot tell what to order"})
                continue
            qty, item = int(found.group(1)), found.group(2)
            calls += 1
            say(tool_call(calls, "lookup", item=item))
        elif tools and tools[-1].get("error"):
            tries += 1  # an item the shop does not know: try another spelling
            calls += 1
            say(tool_call(calls, "lookup", item=f"{item}-{tries}"))
        elif tools and tools[-1]["content"].startswith(f"{item}:"):
            calls += 1
            say(tool_call(calls, "order", item=item, qty=qty))
        elif tools:
            summary = f"ordered {qty} x {item}"
            with open(os.path.join(out, "answer.txt"), "w", encoding="utf-8") as f:
                f.write(summary + "\n")
            if "HANG UP" in task.fields:
                return 0
            say({"role": "assistant", "content": f"Your order is placed: {qty} x {item}."})
        else:
            say({"role": "assistant", "content": "Happy to help."})
    with open(os.path.join(out, "answer.txt"), "w", encoding="utf-8") as f:
        f.write(summary + "\n")
    return 0


def main(argv):
    if "EVALRIG_PROMPT" not in os.environ:
        print(f"{BUILD}: EVALRIG_PROMPT is not set; this agent runs under evalrig (docs/agents.md)", file=sys.stderr)
        return 2
    with open(os.environ["EVALRIG_PROMPT"], encoding="utf-8") as f:
        task = Task(f.read())
    if "--estimate" in argv:
        print(json.dumps(estimate(task)))
        return 0
    work, out = os.environ["EVALRIG_WORK"], os.environ["EVALRIG_OUT"]
    if os.environ.get("EVALRIG_EPISODE") == "1":
        os.makedirs(out, exist_ok=True)
        return episode(task, out)
    u = draw(int(os.environ.get("EVALRIG_SEED", "0")))
    solver = SOLVERS.get(task.family)
    answer = solver(task, work, u) if solver else Answer(text=f"{BUILD} cannot do {task.family!r} tasks")
    os.makedirs(out, exist_ok=True)
    if answer.data is not None:
        with open(os.path.join(out, "answer.json"), "w", encoding="utf-8") as f:
            json.dump(answer.data, f)
    else:
        with open(os.path.join(out, "answer.txt"), "w", encoding="utf-8") as f:
            f.write(answer.text + "\n")
    with open(os.path.join(out, "usage.json"), "w", encoding="utf-8") as f:
        json.dump(usage(task, answer), f)
    print(f"{BUILD}: {task.family}: done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
