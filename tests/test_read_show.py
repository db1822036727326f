"""`show` (docs/reading.md): exact output on a small fixed bundle for every kind of id
(golden files under tests/golden/show; UPDATE_GOLDEN=1 rewrites them), the --json shape,
untrusted text escaped and never read as markup, unknown ids, tampering and torn lines."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import orjson
import pytest
from gate_bundles import counts_tasks
from hypothesis import given, settings
from hypothesis import strategies as st
from read_bundles import HOSTILE, write_bundle, write_tasks
from test_cli_verdict import BETTER, CHAMP, gated
from typer.testing import CliRunner

from evalrig.cli import app
from evalrig.read import render
from evalrig.read.show import show

GOLDEN = Path(__file__).parent / "golden" / "show"


def cli(*args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args], env={"NO_COLOR": "1"})


@pytest.fixture
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_bundle(Path("b"), write_tasks(tmp_path / "t"))
    return Path("b")


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file (UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.parametrize(("name", "id"), [
    ("run.txt", None), ("task-exact.txt", "exact-1"), ("task-regex.txt", "regex-1"), ("trial-json.txt", "json-1:0"),
    ("task-command.txt", "cmd-1"), ("trial-long.txt", "text-1:0"), ("attempt.txt", "a-exact-1-1"), ("attempt-episode.txt", "a-chat-1-1"),
])
def test_show_prints_exactly_the_golden_output(bundle: Path, name: str, id: str | None) -> None:
    r = cli("show", bundle, *([id] if id else []))
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    golden(name, r.stdout)  # type: ignore[attr-defined]


def test_the_json_is_the_same_view_as_one_object(bundle: Path) -> None:
    shapes = {
        None: {"kind": "run", "keys": {"run_id", "status", "counts", "by_suite", "by_tag", "errors", "cost_usd",
                                      "wall_s", "tasks", "integrity"}},
        "exact-1": {"kind": "task", "keys": {"task_id", "expected", "expected_note", "attempts", "verifier"}},
        "exact-1:1": {"kind": "trial", "keys": {"task_id", "expected", "attempts"}},
        "a-chat-1-0": {"kind": "attempt", "keys": {"files", "stdout_tail", "stderr_tail", "transcript", "status"}},
    }
    for id, want in shapes.items():
        r = cli("show", bundle, *([id] if id else []), "--json")
        assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
        obj = json.loads(r.stdout)  # type: ignore[attr-defined]
        assert obj["kind"] == want["kind"] and want["keys"] <= obj.keys()
    run = json.loads(cli("show", bundle, "--json").stdout)  # type: ignore[attr-defined]
    assert run["tasks"][0]["first_failing"]["trial_id"] == "chat-1:1"  # failing tasks first
    assert [t["task_id"] for t in run["tasks"]][-1] == "fixed-1"
    task = json.loads(cli("show", bundle, "exact-1", "--json").stdout)  # type: ignore[attr-defined]
    assert task["expected"] == "42" and task["attempts"][0]["got"] == "42\n"
    episode = json.loads(cli("show", bundle, "a-chat-1-0", "--json").stdout)  # type: ignore[attr-defined]
    turns = episode["transcript"]
    assert [t["type"] for t in turns] == ["session", "message", "turn", "message", "end", "finish"]
    assert turns[1]["messages"][0]["tool_calls"] == [{"id": "c1", "name": "cancel", "arguments": '{"order": 7}'}]
    assert turns[2]["messages"][0]["error"] is True and turns[-1]["termination"] == "driver_end"


def test_an_agents_text_is_never_markup_nor_a_terminal_escape(bundle: Path) -> None:
    for id in ("exact-1", "a-exact-1-1"):
        out = cli("show", bundle, id).stdout  # type: ignore[attr-defined]
        assert "[bold red]pwned[/]" in out
        assert "\x1b" not in out and "\r" not in out and "\u202e" not in out and "\x07" not in out
        assert "\\x1b[2J" in out and "\\r" in out and "\\u202e" in out
    # on a colour terminal: rich tables, the same text printed as it is
    from rich.console import Console

    for id in ("exact-1", "a-exact-1-1", "a-chat-1-1", None):
        buf = io.StringIO()
        render.to_console(show(bundle, id), Console(file=buf, force_terminal=True, color_system="truecolor",
                                                    width=200))
        text = buf.getvalue()
        assert "\x1b[2J" not in text and "\x1b]0;" not in text and "\r" not in text and "\x07" not in text
        if id and "exact" in id:
            assert "[bold red]pwned[/]" in text
    assert HOSTILE not in cli("show", bundle, "a-exact-1-1", "--json").stdout  # type: ignore[attr-defined]


def test_an_unknown_id_exits_4_naming_it_and_the_nearest(bundle: Path) -> None:
    r = cli("show", bundle, "exact-2")
    assert r.exit_code == 4  # type: ignore[attr-defined]
    assert "'exact-2'" in r.stderr and "nearest: exact-1" in r.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in r.output  # type: ignore[attr-defined]
    r = cli("show", Path("nowhere"))
    assert r.exit_code == 4 and "not a bundle" in r.stderr  # type: ignore[attr-defined]


def test_a_tampered_bundle_is_shown_with_a_banner_naming_the_first_digest(bundle: Path) -> None:
    (bundle / "attempts" / "a-exact-1-1" / "out" / "answer.txt").write_text("43\n")
    r = cli("show", bundle, "a-exact-1-1")
    assert r.exit_code == 0  # type: ignore[attr-defined]
    first = r.stdout.splitlines()[0]  # type: ignore[attr-defined]
    assert first.startswith("WARNING: this bundle fails verification: b/attempts/a-exact-1-1/out/answer.txt: digest")
    assert "43" in cli("show", bundle, "exact-1").stdout  # type: ignore[attr-defined]  # still shown
    whole = len((bundle / "results.jsonl").read_bytes().splitlines())
    with (bundle / "results.jsonl").open("ab") as f:
        f.write(b'{"trial_id": "x')
    r = cli("show", bundle)
    assert r.exit_code == 0  # type: ignore[attr-defined]
    assert "b/results.jsonl: digest" in r.stdout  # type: ignore[attr-defined]
    assert f"torn: results.jsonl ends in a torn line {whole + 1}" in r.stdout  # type: ignore[attr-defined]
    view = json.loads(cli("show", bundle, "--json").stdout)  # type: ignore[attr-defined]
    assert view["integrity"]["verified"] is False and view["integrity"]["torn"] == {"results.jsonl": whole + 1}


def test_a_changed_task_never_shows_another_expected_answer(bundle: Path, tmp_path: Path) -> None:
    toml = tmp_path / "t" / "fresh" / "exact-1" / "task.toml"
    toml.write_text(toml.read_text().replace('"42"', '"41"'))
    v = show(bundle, "exact-1")
    assert v["expected"] is None and "verifier changed since the run" in v["expected_note"]


def test_a_comparison_shows_verdict_rules_suites_and_the_tasks_that_moved(
        tmp_path: Path, evalrig_home: Path) -> None:
    champ = counts_tasks(CHAMP)
    cand = counts_tasks(BETTER)
    cand["fresh-000"].passes = [False] * 5  # one task got worse
    _, code = gated(tmp_path, evalrig_home, champ, cand)
    r = cli("show", tmp_path / "cmp")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    out = r.stdout  # type: ignore[attr-defined]
    lines = out.splitlines()
    assert lines[1].startswith("verdict ") and "[decisions/default-v1.json]" in lines[1]
    assert "rules:" in out and "fresh.quality" in out and "suites:" in out
    moved = out[out.index("tasks that moved, worst first:"):].splitlines()
    assert moved[2].split()[0] == "fresh-000"  # the worst first
    golden("comparison.txt", out)
    v = json.loads(cli("show", tmp_path / "cmp", "--json").stdout)  # type: ignore[attr-defined]
    assert v["kind"] == "comparison" and set(v["suites"]) == {"fixed", "fresh", "invariant", "public"}
    assert v["moved"][0]["task_id"] == "fresh-000" and v["moved"][0]["d"] < 0
    assert v["decisions"][0]["rules"][0]["says"]
    (tmp_path / "cmp" / "comparison.json").write_bytes((tmp_path / "cmp" / "comparison.json").read_bytes() + b" ")
    r = cli("show", tmp_path / "cmp")
    assert r.exit_code == 0 and r.stdout.startswith("WARNING: this bundle fails verification")  # type: ignore[attr-defined]
    assert cli("show", tmp_path / "cmp", "fresh-999").exit_code == 4  # type: ignore[attr-defined]


def test_a_whole_line_without_its_fields_is_named_not_a_crash(bundle: Path) -> None:
    with (bundle / "results.jsonl").open("ab") as f:
        f.write(b'{"trial_id": 7}\n')
    r = cli("show", bundle)
    assert r.exit_code == 4, r.output  # type: ignore[attr-defined]
    assert "results.jsonl:15: trial_id: expected a string, got 7" in r.stderr  # type: ignore[attr-defined]


def test_a_link_planted_in_the_evidence_is_not_followed(bundle: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the reader's own secret\n")
    ev = bundle / "attempts" / "a-chat-1-1"
    (ev / "transcript.jsonl").unlink()
    (ev / "transcript.jsonl").symlink_to(secret)
    (bundle / "attempts" / "a-exact-1-1" / "out" / "answer.txt").unlink()
    (bundle / "attempts" / "a-exact-1-1" / "out" / "answer.txt").symlink_to(secret)
    for id in ("a-chat-1-1", "exact-1"):
        r = cli("show", bundle, id)
        assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
        assert "secret" not in r.stdout and r.stdout.startswith("WARNING: this bundle fails verification")  # type: ignore[attr-defined]


def test_an_attempt_id_that_climbs_out_is_refused(bundle: Path) -> None:
    data = (bundle / "results.jsonl").read_bytes().replace(b'"a-exact-1-1"', b'"../../etc"', 1)
    (bundle / "results.jsonl").write_bytes(data)
    r = cli("show", bundle, "exact-1")
    assert r.exit_code == 4 and "attempt_id: '../../etc' is not an id" in r.stderr  # type: ignore[attr-defined]


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1 << 20])
def test_streamed_lines_are_whole_lines_at_any_chunk_size(tmp_path: Path, chunk: int) -> None:
    from evalrig.store.jsonl import stream_lines, whole_lines

    data = b'{"a":1}\n\n{"b":"x\\ny"}\n{"c":3}\n{"torn'
    (tmp_path / "f.jsonl").write_bytes(data)
    torn: list[int] = []
    got = list(stream_lines(tmp_path / "f.jsonl", torn, chunk))
    want, want_torn = whole_lines(data)
    assert [raw for _, raw in got] == want and [i for i, _ in got] == [1, 2, 3, 4] and torn == [want_torn]
    torn = []
    assert list(stream_lines(tmp_path / "missing.jsonl", torn)) == [] and torn == []


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["t:0", "t:1", "u:0"]), st.sampled_from(["A", "B"]),
                          st.sampled_from(["passed", "failed", "infra_error", "interrupted"])), max_size=12))
def test_the_summary_counts_the_attempt_the_rule_counts(seq: list[tuple[str, str, str]]) -> None:
    # the streamed summary keeps little per trial; it must still pick what final_of picks
    import tempfile
    from types import SimpleNamespace

    from evalrig.core.outcomes import final_of
    from evalrig.read.bundle import Opened
    from evalrig.read.show import _final_rows

    recs = [{"trial_id": t, "attempt_id": f"a{i}", "task_id": t[0], "suite": "fresh", "status": s,
             "inputs_id": inp, "rep": 0} for i, (t, inp, s) in enumerate(seq)]
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
        final, _, n = _final_rows(Opened(Path(tmp), "run"))
    want = final_of([SimpleNamespace(**r) for r in recs])
    assert n == len(recs)
    # a passed row is shared by its task (only failing ones are shown with their attempt)
    assert {t: (row[5], row[4] if row[5] != "passed" else "") for t, (row, ok) in final.items() if ok} == {
        t: (r.status, r.attempt_id if r.status != "passed" else "") for t, r in want.items()}
    assert all(not ok for t, (_, ok) in final.items() if t not in want)


def test_a_run_summary_imports_only_what_it_reads(bundle: Path) -> None:
    """The summary's budget (≤ 1 s for 50,000 results, docs/reading.md) leaves no room for the
    models of other files, the verifiers or the terminal renderer under --json."""
    import subprocess
    import sys

    code = ("import sys\nfrom evalrig.cli import app\n"
            "try:\n    app(['show', 'b', '--json'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('evalrig.models.comparison', 'evalrig.models.releases', 'evalrig.models.agent',"
            " 'evalrig.attempt.verifiers', 'evalrig.read.render', 'rich') if m in sys.modules), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NO_COLOR": "1"})
    assert json.loads(p.stdout)["kind"] == "run", p.stderr
    assert p.stderr.strip().splitlines()[-1] == "[]"


def test_a_comparisons_task_lists_both_sides_trials_and_says_when_a_run_moved(
        tmp_path: Path, evalrig_home: Path) -> None:
    champ = counts_tasks(CHAMP)
    cand = counts_tasks(BETTER)
    cand["fresh-000"].passes = [False] * 5
    gated(tmp_path, evalrig_home, champ, cand)
    r = cli("show", tmp_path / "cmp", "fresh-000")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    golden("comparison-task.txt", r.stdout.replace(str(tmp_path), "<tmp>"))  # type: ignore[attr-defined]
    v = json.loads(cli("show", tmp_path / "cmp", "fresh-000", "--json").stdout)  # type: ignore[attr-defined]
    assert v["kind"] == "comparison-task" and v["d"] < 0
    for side, want in (("champion", champ), ("candidate", cand)):
        s = v["sides"][side]
        assert s["note"] is None and s["bundle"] == str(tmp_path / ("a" if side == "champion" else "b"))
        got = [a["status"] == "passed" for a in s["trials"]["attempts"]]
        assert got == want["fresh-000"].passes and s["trials"]["task_id"] == "fresh-000"
    # the champion's bundle moved: said, and the comparison's own numbers and the candidate still shown
    (tmp_path / "a").rename(tmp_path / "a-moved")
    r = cli("show", tmp_path / "cmp", "fresh-000")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    out = r.stdout.replace(str(tmp_path), "<tmp>")  # type: ignore[attr-defined]
    assert f"trials not shown: the champion's run bundle ({v['sides']['champion']['run_id']}) has moved: it is no " \
           "longer at <tmp>/a" in out
    assert out.startswith("task fresh-000 (fresh): champion ") and "candidate attempts:" in out
    # another run in its place: not shown as this comparison's
    (tmp_path / "a").symlink_to(tmp_path / "b")
    v = json.loads(cli("show", tmp_path / "cmp", "fresh-000", "--json").stdout)  # type: ignore[attr-defined]
    assert v["sides"]["champion"]["trials"] is None and "not the one compared" in v["sides"]["champion"]["note"]


def test_a_comparisons_run_paths_are_shown_escaped(tmp_path: Path, evalrig_home: Path) -> None:
    gated(tmp_path, evalrig_home, counts_tasks(CHAMP), counts_tasks(BETTER))
    manifest = tmp_path / "cmp" / "manifest.json"
    m = json.loads(manifest.read_text())
    m["runs"]["champion"] = str(tmp_path / "gone\x1b[2J\r")  # a tampered manifest: a path that is not there
    manifest.write_text(json.dumps(m))
    r = cli("show", tmp_path / "cmp", "fresh-000")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    out = r.stdout  # type: ignore[attr-defined]
    assert "\x1b" not in out and "\r" not in out and "has moved" in out and "gone\\x1b[2J\\r" in out


def test_show_speaks_the_verdict_files_words_orders_by_repetition_and_states_expected_once(
        tmp_path: Path, evalrig_home: Path) -> None:
    """`show` of a comparison: the rules' outcomes as the verdict file words them ("met",
    "holds", "no loss shown"), differences in points; a task's trials by repetition (the
    results' lines are in the order attempts finished), and what was expected said once."""
    from redteam import eval_sh

    champ = counts_tasks(CHAMP)
    cand = counts_tasks(BETTER)
    cand["fresh-000"].passes = [False] * 5
    gated(tmp_path, evalrig_home, champ, cand)
    s = eval_sh(evalrig_home, "show", tmp_path / "cmp")
    assert s.code == 0, s
    rules = s.stdout[s.stdout.index("rules:"):s.stdout.index("suites:")]
    assert "fresh.quality                met " in rules and "fresh.loss                   no loss shown" in rules
    assert "not held" not in rules and " held " not in rules
    assert "+15.3 points" in s.stdout.split("suites:")[1] and "-100.0 points" in s.stdout
    v = json.loads(eval_sh(evalrig_home, "show", tmp_path / "cmp", "--json").stdout)
    assert {r["outcome"] for r in v["decisions"][0]["rules"]} >= {"met", "holds", "no loss shown"}
    # the champion's attempts finished out of order (jobs > 1): shown by repetition all the same
    results = tmp_path / "a" / "results.jsonl"
    results.write_bytes(b"".join(reversed(results.read_bytes().splitlines(keepends=True))))
    s = eval_sh(evalrig_home, "show", tmp_path / "cmp", "fresh-000")
    assert s.code == 0, s
    champion = s.stdout[s.stdout.index("champion attempts:"):s.stdout.index("candidate (")]
    trials = [ln.split()[0] for ln in champion.splitlines()[2:] if ln.startswith("  fresh-000:")]
    assert trials == [f"fresh-000:{i}" for i in range(5)], champion
    assert s.stdout.count("expected:") == 1 and s.stdout.splitlines()[1].startswith("expected: ")
    v = json.loads(eval_sh(evalrig_home, "show", tmp_path / "a", "fresh-000", "--json").stdout)
    assert [a["rep"] for a in v["attempts"]] == [0, 1, 2, 3, 4]


def test_hints_name_the_rig_as_the_person_invoked_it(tmp_path: Path, evalrig_home: Path) -> None:
    """Through eval.sh, the commands `show` and `report` suggest are `…/eval.sh …`, never a
    bare `evalrig` that is not on the person's PATH."""
    from redteam import EVAL_SH, eval_sh

    gated(tmp_path, evalrig_home, counts_tasks(CHAMP), counts_tasks(BETTER))
    results = tmp_path / "a" / "results.jsonl"
    data = results.read_bytes()
    end = data.index(b"\n")
    results.write_bytes(data[:end] + b" " + data[end:])  # tampered: the banner says how to see every problem
    s = eval_sh(evalrig_home, "show", tmp_path / "a")
    assert s.code == 0 and f"(`{EVAL_SH} verify {tmp_path / 'a'}` lists every problem)" in s.stdout, s
    s = eval_sh(evalrig_home, "show", tmp_path / "cmp", "fresh-000")
    assert s.code == 0 and f"`{EVAL_SH} verify" in s.stdout and "`evalrig " not in s.stdout, s
    s = eval_sh(evalrig_home, "report")
    assert s.code == 2 and f"{EVAL_SH} report runs/cmp, or {EVAL_SH} report --log" in s.stderr, s
    s = eval_sh(evalrig_home, "show", tmp_path / "a", "no-such-task")
    assert s.code == 4 and f"`{EVAL_SH} show BUNDLE` lists the tasks" in s.stderr, s
