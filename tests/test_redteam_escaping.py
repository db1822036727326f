"""Red team, issue 20 finding 10: untrusted text in the files a person reads, through `eval.sh`.

A candidate whose checkpoint.toml `name` held ESC, BEL, a CSI sequence and U+202E had it
written as-is into `decisions/*.md`, the file a person signs; `report.html` escaped the HTML
but kept the controls, and `sign` and `check-release` printed a sign-off's `by` raw on the
terminal. Now (docs/security.md, "Untrusted text in the files a person reads"): in the verdict
file and comparison.md untrusted text is one code span on one line, characters of Unicode
categories Cc, Cf, Zl and Zp shown as `\\xNN` / `\\uNNNN`, never a link, an image or HTML; the
HTML report and the terminal show the same characters escaped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from redteam import (
    HONEST_AGENT,
    SMALL_POLICY,
    add_task,
    bwrap_works,
    eval_sh,
    make_checkpoint,
    results,
    run_train,
    write_policy,
)

from evalrig.core.untrusted import escaped, json_escaped, md_code, md_line

# What the attacker names its build: a terminal escape that clears the screen, a bell, an
# OSC title, a right-to-left override, a zero-width joiner, a line separator, a newline
# and a carriage return that would fake a line, and Markdown that would make a link, an
# image, HTML and a code span of its own.
NAME = ("build\x1b[2J\x07\x1b]0;owned\x07 \u202eevil\u200d\u2028[click](http://x) <img src=x> "
        "``tick`` a\\b\nline2\rover")
# The name as the verdict file shows it, written out by hand: a run of three backticks
# (the name holds a run of two), backslash doubled, every control escaped.
NAME_SPAN = ("```" + r"build\x1b[2J\x07\x1b]0;owned\x07 \u202eevil\u200d\u2028[click](http://x) <img src=x> "
             r"``tick`` a\\b\nline2\rover" + "```")
BY = "eve\x1b[2J\u202e"
BY_SPAN = r"`eve\x1b[2J\u202e`"
# Raw characters of the categories the rig escapes, any one of which must never reach a reader.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2028\u2029\u2060-\u2064\ufeff]")


def raw_in(text: str) -> list[str]:
    return sorted(set(RAW.findall(text)))


def test_a_hostile_checkpoint_name_reaches_no_reader_raw(tmp_path: Path, evalrig_home: Path) -> None:
    sandbox = "bwrap" if bwrap_works() else "process"
    policy = SMALL_POLICY if sandbox == "bwrap" else SMALL_POLICY.replace('"sealed", "isolated",', '"sealed",')
    champion = make_checkpoint(tmp_path / "champion", HONEST_AGENT.replace('"ok', '"no'), name="champion")
    candidate = make_checkpoint(tmp_path / "candidate", name=json.dumps(NAME)[1:-1])  # TOML's escapes are JSON's
    train = run_train(evalrig_home, tmp_path / "train", champion, candidate, sandbox=sandbox,
                      policy=write_policy(tmp_path / "policies", policy))
    assert train.steps["gate"].code == 0, train.steps["gate"]  # promoted: the name changes nothing
    seal = train.steps["seal-candidate"]
    assert raw_in(seal.stdout + seal.stderr) == [] and "a\\b\\nline2\\rover" in seal.stdout, seal  # one line
    decision = train.decision
    before = decision.read_bytes()

    signed = eval_sh(evalrig_home, "sign", decision, "--approve", "--by", BY)
    assert signed.code == 0, signed
    verdict = decision.with_suffix(".md").read_text()
    comparison = (train.cmp / "comparison.md").read_text()
    for md in (verdict, comparison):
        assert raw_in(md) == [], raw_in(md)
    short = json.loads(before)["candidate"]["checkpoint_id"].removeprefix("sha256:")[:12]
    assert f"- candidate: {NAME_SPAN} `{short}`, run `" in verdict  # one line, one code span
    assert f", checkpoint {NAME_SPAN} `{short}`" in comparison
    assert f"**Signed: approved by {BY_SPAN}** at " in verdict
    assert decision.read_bytes() == before  # the decision keeps the raw values; only the rendering escapes

    report = eval_sh(evalrig_home, "report", train.cmp)
    assert report.code == 0, report
    html = (train.cmp / "report.html").read_text()
    assert raw_in(html) == [], raw_in(html)
    assert "<img src=x>" not in html and "\\x1b[2J\\x07" in html and "\\u202eevil\\u200d" in html

    terminal = [
        eval_sh(evalrig_home, "show", train.cmp),
        eval_sh(evalrig_home, "show", train.bundle("candidate")),
        eval_sh(evalrig_home, "gate", train.cmp, "--policy", train.policy),
        signed,
        eval_sh(evalrig_home, "check-release", decision, "--checkpoint", candidate),
        eval_sh(evalrig_home, "ship", decision, "--checkpoint", candidate),
        eval_sh(evalrig_home, "champion"),
        eval_sh(evalrig_home, "history"),
    ]
    for step in terminal:
        assert step.code in (0, 1), step
        assert raw_in(step.stdout + step.stderr) == [], step
    assert "approved by eve\\x1b[2J\\u202e" in terminal[4].stdout, terminal[4]
    assert "build\\x1b[2J\\x07" in terminal[6].stdout + terminal[7].stdout, terminal[6]
    # --json on a terminal: the same values (JSON escapes), no raw override or joiner
    history = eval_sh(evalrig_home, "history", "--json")
    assert history.code == 0 and raw_in(history.stdout) == [], history
    assert history.json["events"][0]["candidate"]["name"] == NAME  # type: ignore[index]


@pytest.mark.parametrize(("text", "span"), [
    ("exo", "`exo`"),
    ("", "` `"),
    ("a`b", "``a`b``"),
    ("```x", "```` ```x ````"),  # begins with a backtick: padded, CommonMark strips one space
    ("x`", "`` x` ``"),
    (" x ", "`  x  `"),  # its own spaces kept
    ("a\\b", r"`a\\b`"),  # backslashes doubled: a real ESC and the text "\x1b" differ
    ("\\x1b", r"`\\x1b`"),
    ("one\ntwo\r\tend", r"`one\ntwo\r\tend`"),  # one line
    ("\x1b[2J\x07\x00\x7f\x85", r"`\x1b[2J\x07\x00\x7f\x85`"),  # Cc, C1 included
    ("\u202e\u200d\u200b\ufeff\u2066", r"`\u202e\u200d\u200b\ufeff\u2066`"),  # Cf: bidi, zero-width, BOM
    ("\u2028\u2029", r"`\u2028\u2029`"),  # Zl, Zp
    ("tag\U000e0041", r"`tag\U000e0041`"),  # Cf beyond the basic plane
    ("[click](http://x) <img src=x> &#x1b; | ![i](x)", "`[click](http://x) <img src=x> &#x1b; | ![i](x)`"),
    ("caf\u00e9 \u00a0 \u65e5\u672c", "`caf\u00e9 \u00a0 \u65e5\u672c`"),  # letters and spaces stay as they are
])
def test_md_code_is_one_inert_code_span(text: str, span: str) -> None:
    assert md_code(text) == span


def test_md_line_quotes_untrusted_text_inert_in_the_rigs_sentences() -> None:
    assert md_line("p_worse <= 0.025, mean_d >= 0.05 (4 tasks)") == "p_worse <= 0.025, mean_d >= 0.05 (4 tasks)"
    assert md_line("x <img src=x> </b> <!-- c --> <a:b>") == r"x \<img src=x> \</b> \<!-- c --> \<a:b>"
    assert md_line("[a](b) ![i](j) `c` &amp; &#27; & b") == r"\[a](b) !\[i](j) \`c\` \&amp; \&#27; & b"
    assert md_line("see http://x.y and www.x.y") == r"see http:\/\/x.y and www\.x.y"
    assert md_line("a\\b \x1b \u202e\nz") == r"a\\\\b \\x1b \\u202e\\nz"  # renders a\\b \x1b \u202e\nz


def test_escaped_shows_each_category_and_keeps_newlines_where_asked() -> None:
    assert escaped("a\x1b\x07\t\r\nb") == r"a\x1b\x07\t\r\nb"
    assert escaped("a\x1b\nb", newlines=True) == "a\\x1b\nb"
    assert escaped("\u202e\u2028\u2029\u200d\U000e0001") == r"\u202e\u2028\u2029\u200d\U000e0001"
    assert escaped("caf\u00e9 \u00a0 [b] <i>") == "caf\u00e9 \u00a0 [b] <i>"


def test_json_escaped_is_the_same_json_without_raw_format_characters() -> None:
    text = json.dumps({"name": "x\u202e\u200d\u2028\x85\x7f\U000e0001 caf\u00e9\n"}, ensure_ascii=False, indent=2)
    out = json_escaped(text)
    assert json.loads(out) == json.loads(text)
    assert out == '{\n  "name": "x\\u202e\\u200d\\u2028\\u0085\\u007f\\udb40\\udc01 caf\u00e9\\n"\n}'


# A command verifier that names a check after every file the agent left (a verifier's words
# quoting the agent: reward.json's check names are untrusted text).
LISTING_VERIFIER = """\
import json, os
root = os.environ["EVALRIG_EVIDENCE"]
names = sorted(os.listdir(os.path.join(root, "out")))
with open(os.path.join(os.environ["EVALRIG_VERDICT"], "reward.json"), "w") as f:
    json.dump({"reward": 1, "checks": {n: True for n in names}}, f)
"""
FILE_AGENT = """\
import os
out = os.environ["EVALRIG_OUT"]
with open(os.path.join(out, "answer.txt"), "w") as f:
    f.write("ok\\n")
with open(os.path.join(out, "x\\x1b[2J\\u202eevil\\u200d"), "w") as f:
    f.write("")
"""


def test_check_names_and_tags_reach_no_reader_raw(tmp_path: Path, evalrig_home: Path) -> None:
    sandbox = "bwrap" if bwrap_works() else "process"
    checkpoint = make_checkpoint(tmp_path / "agent", FILE_AGENT, name="lister")
    assert eval_sh(evalrig_home, "seal", checkpoint).code == 0
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "fx0", extra=f"tags = [{json.dumps('tag' + chr(0x202E) + 'x')}]",
             verifier='kind = "command"\ncommand = ["python3", "check.py"]',
             verifier_files={"check.py": LISTING_VERIFIER})
    bundle = tmp_path / "run"
    run = eval_sh(evalrig_home, "run", "--checkpoint", checkpoint, "--tasks", tasks, "--out", bundle,
                  "--sandbox", sandbox, "--repeat", "1")
    assert run.code == 0, run
    checks = results(bundle)[0]["checks"]
    assert "x\x1b[2J\u202eevil\u200d" in checks  # type: ignore[operator]  # the record keeps the raw name
    for args in ((bundle,), (bundle, "fx0"), (bundle, "--json"), (bundle, "fx0", "--json"), ("report", bundle)):
        step = eval_sh(evalrig_home, *(("show",) if args[0] != "report" else ()), *args)
        assert step.code == 0 and raw_in(step.stdout + step.stderr) == [], step
    shown = eval_sh(evalrig_home, "show", bundle, "fx0").stdout + eval_sh(evalrig_home, "show", bundle).stdout
    assert "x\\x1b[2J\\u202eevil\\u200d" in shown and "tag\\u202ex" in shown
    html = (bundle / "report.html").read_text()
    assert raw_in(html) == [], raw_in(html)


def test_a_task_id_that_reads_as_an_address_is_no_link_in_comparison_md(tmp_path: Path, evalrig_home: Path) -> None:
    """A task id may be `www.evil0.example` ([A-Za-z0-9._-]); GitHub's Markdown makes a bare
    `www.` word a link, so comparison.md's per-task table shows ids as code spans."""
    sandbox = "bwrap" if bwrap_works() else "process"
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "www.evil0.example")
    add_task(tasks, "fixed", "fx1")
    champion = make_checkpoint(tmp_path / "champion", HONEST_AGENT.replace('"ok', '"no'), name="champion")
    candidate = make_checkpoint(tmp_path / "candidate", name="candidate")
    train = run_train(evalrig_home, tmp_path / "train", champion, candidate, tasks=tasks, sandbox=sandbox,
                      repeat=1, stop_after="compare")
    assert train.steps["compare"].code == 0, train.steps["compare"]
    comparison = (train.cmp / "comparison.md").read_text()
    rows = [line for line in comparison.splitlines() if "evil0" in line and line.startswith("|")]
    assert rows and all(line.startswith("| `www.evil0.example` |") for line in rows), rows
    assert not re.search(r"(?<![`\\])www\.evil0", comparison.replace("`www.evil0.example`", "")), comparison
